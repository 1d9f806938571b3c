//! `warren-perf`: load generator for AMQP 0-9-1 brokers. See `warren-perf --help` and
//! `BENCHMARKS.md`; the code lives in `tests/src/perf/`.

#[path = "../perf/mod.rs"]
mod perf;

fn main() -> std::process::ExitCode {
    perf::main()
}
