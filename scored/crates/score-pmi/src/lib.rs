//! PMI-1 for the ranks that scored's agent starts: the wire protocol of
//! MPICH's "simple PMI" (the one its hydra `mpiexec` and Slurm's `pmi`
//! plugin speak), so that MPICH programs, which have no PMIx client, run
//! under `scrun` (docs/scored/user.md, "MPICH").
//!
//! This crate is the protocol alone, free of I/O as quinn-proto is: a
//! [`JobPmi`] takes a rank's request lines and says what to answer; the
//! barrier, the one job-wide operation, yields this node's contribution
//! ([`Outcome::Fence`]) for the agent to carry through the master's fence,
//! and [`JobPmi::fence_complete`] takes every node's contributions back.
//! The agent owns the sockets (`scored/src/agent/pmi.rs`).
//!
//! Wire format (PMI-1, one request or reply per line): `cmd=NAME key=value
//! ...\n`; values end at a space, a backslash escapes the next byte.
//! Protocol: docs/scored/protocol.md, "PMI-1".

mod kvs;
mod server;
mod wire;

pub use kvs::{decode_contributions, encode_contribution, BlobError};
pub use server::{JobPmi, JobShape, Outcome, MAX_LINE};
pub use wire::{escape, parse, ParseError, Request};
