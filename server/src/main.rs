//! The `warren` binary: parse settings, start the broker, stop on SIGINT or SIGTERM.

use anyhow::Context;

/// mimalloc rather than the system allocator: glibc's per-thread arenas kept hundreds of MB
/// of freed message memory after a burst, and allocation was a tenth of the message path.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use warren_server::Config;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some("ctl") {
        if let Err(error) = warren_server::ctl::run(args) {
            eprintln!("warren ctl: {error}");
            std::process::exit(error.exit_code());
        }
        return Ok(());
    }
    let huge_pages = warren_server::allocator::disable_transparent_huge_pages();
    warren_server::allocator::purge_freed_memory_at_once();
    let config = match Config::from_args() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("warren: {error}");
            std::process::exit(2);
        }
    };
    match warren_server::logging::init(&config.log) {
        Ok(Some(file)) => warren_server::logging::reopen_on_sigusr1(file).context("installing the SIGUSR1 handler")?,
        Ok(None) => {}
        Err(error) => {
            eprintln!("warren: cannot open the log file: {error}");
            std::process::exit(2);
        }
    }
    if let Err(error) = huge_pages {
        tracing::warn!(%error, "cannot turn transparent huge pages off; memory per queue will be higher");
    }
    match warren_server::open_files::raise_to_hard_limit() {
        Ok(limit) => {
            let segment_files = warren_server::open_files::segment_file_share(limit.now);
            warren_storage::set_max_open_segment_files(segment_files);
            tracing::info!(before = limit.before, now = limit.now, segment_files, "open files limit")
        }
        Err(error) => {
            tracing::warn!(%error, "cannot raise the open files limit; connections may run out of descriptors")
        }
    }
    let running = warren_server::start(config).await.context("starting the broker")?;
    wait_for_signal().await?;
    tracing::info!("shutting down: closing connections");
    running.shutdown().await;
    tracing::info!("stopped");
    Ok(())
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result.context("waiting for SIGINT")?,
        _ = terminate.recv() => {}
    }
    Ok(())
}
