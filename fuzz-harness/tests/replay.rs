//! Replays every committed fuzz input (the corpora in `fuzz/corpus/TARGET/` and the crash
//! reproducers in `fuzz/regressions/TARGET/`) through its target, on stable, in CI.

use std::path::Path;
use warren_fuzz_harness::TARGETS;

fn inputs(dir: &Path) -> Vec<Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut paths: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file()).collect();
    paths.sort();
    paths.iter().filter_map(|path| std::fs::read(path).ok()).collect()
}

#[test]
fn every_committed_input_runs_through_its_target() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    for target in TARGETS {
        let corpus = inputs(&fuzz.join("corpus").join(target.name));
        assert!(!corpus.is_empty(), "fuzz/corpus/{} has no inputs", target.name);
        let regressions = inputs(&fuzz.join("regressions").join(target.name));
        for input in corpus.iter().chain(&regressions) {
            (target.run)(input);
        }
        eprintln!("{}: {} corpus inputs, {} reproducers", target.name, corpus.len(), regressions.len());
    }
}
