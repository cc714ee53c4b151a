//! The Ousterhout matrix of gang scheduling: one row per time slot, one
//! column per node; a cell holds the job that owns that node in that slot.
//! The cluster runs one row at a time and switches rows every quantum, on
//! all nodes together.
//!
//! A job also runs outside its own row whenever none of its nodes is taken
//! in the active row ("alternative scheduling"), so jobs that do not share
//! nodes never stop, and a job placed on idle nodes runs at once (space
//! sharing first).  Pure logic: no I/O, no clocks.

use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Default)]
pub struct Matrix {
    rows: Vec<BTreeMap<String, u64>>,
    current: usize,
    max_rows: usize,
}

impl Matrix {
    /// `max_rows` = 1 is plain space sharing: a job waits until its nodes
    /// are free.
    pub fn new(max_rows: usize) -> Self {
        Self {
            rows: Vec::new(),
            current: 0,
            max_rows: max_rows.max(1),
        }
    }

    pub fn rows(&self) -> &[BTreeMap<String, u64>] {
        &self.rows
    }

    pub fn current(&self) -> usize {
        self.current
    }

    fn nodes_of(&self, job: u64) -> Vec<&String> {
        self.rows
            .iter()
            .flat_map(|r| r.iter().filter(move |(_, &j)| j == job).map(|(n, _)| n))
            .collect()
    }

    /// The jobs that run while row `row` is active: its own, then, in row
    /// order, every other job none of whose nodes is taken yet.
    pub fn active_set(&self, row: usize) -> BTreeSet<u64> {
        let mut active = BTreeSet::new();
        let Some(r) = self.rows.get(row) else {
            return active;
        };
        let mut taken: BTreeSet<&String> = r.keys().collect();
        active.extend(r.values().copied());
        for (i, other) in self.rows.iter().enumerate() {
            if i == row {
                continue;
            }
            let jobs: BTreeSet<u64> = other.values().copied().collect();
            for job in jobs {
                let nodes = self.nodes_of(job);
                if nodes.iter().all(|n| !taken.contains(n)) {
                    taken.extend(nodes);
                    active.insert(job);
                }
            }
        }
        active
    }

    /// Places `job` on `want` of the `usable` nodes (in the caller's order
    /// of preference) in the first row, starting from the active one, that
    /// has them free; opens a new row if none has and the matrix may grow.
    /// In the active row a node is free only if no running job uses it.
    /// Returns the row and the nodes.
    pub fn place(
        &mut self,
        job: u64,
        want: usize,
        usable: &[String],
    ) -> Option<(usize, Vec<String>)> {
        if want == 0 || usable.len() < want {
            return None;
        }
        let n = self.rows.len();
        let running = self.active_set(self.current);
        let running_nodes: BTreeSet<&String> =
            running.iter().flat_map(|&j| self.nodes_of(j)).collect();
        for k in 0..n {
            let row = (self.current + k) % n;
            let Some(cells) = self.rows.get(row) else {
                continue;
            };
            let free: Vec<&String> = usable
                .iter()
                .filter(|node| !cells.contains_key(*node))
                .filter(|node| row != self.current || !running_nodes.contains(node))
                .collect();
            if free.len() >= want {
                // Prefer nodes idle in every row: fewer jobs share them.
                let mut chosen: Vec<String> = free
                    .iter()
                    .filter(|node| self.rows.iter().all(|r| !r.contains_key(**node)))
                    .map(|s| (*s).clone())
                    .take(want)
                    .collect();
                for node in &free {
                    if chosen.len() == want {
                        break;
                    }
                    if !chosen.contains(node) {
                        chosen.push((*node).clone());
                    }
                }
                if let Some(cells) = self.rows.get_mut(row) {
                    cells.extend(chosen.iter().map(|node| (node.clone(), job)));
                }
                return Some((row, chosen));
            }
        }
        if n < self.max_rows {
            let mut chosen: Vec<String> = usable
                .iter()
                .filter(|node| self.rows.iter().all(|r| !r.contains_key(*node)))
                .take(want)
                .cloned()
                .collect();
            for node in usable {
                if chosen.len() == want {
                    break;
                }
                if !chosen.contains(node) {
                    chosen.push(node.clone());
                }
            }
            self.rows
                .push(chosen.iter().map(|node| (node.clone(), job)).collect());
            return Some((n, chosen));
        }
        None
    }

    /// Takes `job` out.  Its row stays, even if empty, until [`compact`]:
    /// row numbers must not move under a switch in progress.
    ///
    /// [`compact`]: Matrix::compact
    pub fn remove(&mut self, job: u64) {
        for r in &mut self.rows {
            r.retain(|_, j| *j != job);
        }
    }

    /// Drops empty rows; the active row stays the same row, or becomes the
    /// next one if it was dropped.
    pub fn compact(&mut self) {
        let mut i = 0;
        while i < self.rows.len() {
            if self.rows.get(i).is_some_and(BTreeMap::is_empty) {
                self.rows.remove(i);
                if self.current > i {
                    self.current -= 1;
                }
            } else {
                i += 1;
            }
        }
        if self.current >= self.rows.len() {
            self.current = 0;
        }
    }

    /// The next non-empty row after the active one, if there is another.
    pub fn next_row(&self) -> Option<usize> {
        let n = self.rows.len();
        (1..n)
            .map(|k| (self.current + k) % n)
            .find(|&r| self.rows.get(r).is_some_and(|cells| !cells.is_empty()))
    }

    /// The matrix a restarted master saved: `rows` of cells, `current`
    /// the active one.
    pub fn restore(&mut self, rows: Vec<BTreeMap<String, u64>>, current: usize) {
        self.rows = rows;
        self.current = if current < self.rows.len() {
            current
        } else {
            0
        };
    }

    pub fn set_current(&mut self, row: usize) {
        if row < self.rows.len() {
            self.current = row;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("n{i}")).collect()
    }

    #[test]
    fn space_sharing_first_then_new_rows() {
        let mut m = Matrix::new(4);
        let all = nodes(4);
        assert_eq!(
            m.place(1, 2, &all),
            Some((0, vec!["n1".into(), "n2".into()]))
        );
        assert_eq!(
            m.place(2, 2, &all),
            Some((0, vec!["n3".into(), "n4".into()]))
        );
        // No free node in row 0: a second row.
        assert_eq!(m.place(3, 4, &all).map(|p| p.0), Some(1));
        assert_eq!(m.active_set(0), BTreeSet::from([1, 2]));
        assert_eq!(m.active_set(1), BTreeSet::from([3]));
    }

    #[test]
    fn one_row_means_waiting() {
        let mut m = Matrix::new(1);
        let all = nodes(2);
        assert!(m.place(1, 2, &all).is_some());
        assert!(m.place(2, 1, &all).is_none());
        m.remove(1);
        m.compact();
        assert!(m.place(2, 1, &all).is_some());
    }

    #[test]
    fn jobs_without_conflicts_run_in_every_row() {
        let mut m = Matrix::new(4);
        let all = nodes(4);
        m.place(1, 4, &all).unwrap(); // row 0: n1..n4
        m.place(2, 2, &all).unwrap(); // row 1: n1, n2
        m.place(3, 2, &all).unwrap(); // row 1: n3, n4
        m.remove(1);
        m.compact();
        // row 0 was removed; row 1 is now row 0 and holds both.
        assert_eq!(m.rows().len(), 1);
        assert_eq!(m.active_set(0), BTreeSet::from([2, 3]));
        // A job on n1 in a new row conflicts with 2 only: 3 runs in both rows.
        m.place(4, 1, &["n1".to_string()]).unwrap();
        assert_eq!(m.active_set(1), BTreeSet::from([3, 4]));
    }

    #[test]
    fn a_full_matrix_refuses() {
        let mut m = Matrix::new(2);
        let all = nodes(1);
        m.place(1, 1, &all).unwrap();
        m.place(2, 1, &all).unwrap();
        assert!(m.place(3, 1, &all).is_none());
        assert_eq!(m.next_row(), Some(1));
        m.remove(2);
        assert_eq!(m.next_row(), None, "empty rows are skipped");
    }

    #[test]
    fn the_active_row_does_not_take_nodes_of_running_alternates() {
        let mut m = Matrix::new(4);
        let all = nodes(2);
        m.place(1, 1, &all).unwrap(); // row 0 n1
        m.place(2, 2, &all).unwrap(); // row 1 n1 n2
        m.place(3, 1, &all).unwrap(); // row 0 n2
        m.remove(3);
        m.remove(1);
        m.compact(); // row 0 empty -> removed; job 2's row is active
        assert_eq!(m.current(), 0);
        assert_eq!(m.active_set(0), BTreeSet::from([2]));
        assert_eq!(m.place(4, 1, &all).map(|p| p.0), Some(1));
    }

    #[test]
    fn removing_rows_keeps_the_active_index_valid() {
        let mut m = Matrix::new(4);
        let all = nodes(1);
        for j in 1..=3 {
            m.place(j, 1, &all).unwrap();
        }
        m.set_current(2);
        m.remove(1);
        assert_eq!(m.current(), 2, "rows stay until compacted");
        m.compact();
        assert_eq!(m.current(), 1);
        assert_eq!(m.active_set(m.current()), BTreeSet::from([3]));
        m.remove(3);
        m.compact();
        assert_eq!(m.current(), 0);
    }
}
