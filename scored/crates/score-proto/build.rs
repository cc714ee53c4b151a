fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=../../proto/score.proto");
    println!("cargo:rerun-if-changed=../../proto/state.proto");
    tonic_prost_build::configure().compile_protos(
        &["../../proto/score.proto", "../../proto/state.proto"],
        &["../../proto"],
    )?;
    Ok(())
}
