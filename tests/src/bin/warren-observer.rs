//! warren-observer: watches a Warren as its web UI and a Prometheus server do, so that a
//! benchmark can measure what watching costs (`bench/compare.sh --observed`). It logs in as
//! the UI does (`POST /api/login`, then the session cookie on `/ws`), subscribes to the live
//! feed with the queues table (the UI's heaviest page), and scrapes `/metrics` and
//! `/metrics/per-object` once a second. On SIGTERM, SIGINT or after `--duration` it prints
//! what it received, and fails if the feed or a scrape did not answer.

use anyhow::{bail, Context, Result};
use clap::Parser;
use futures_util::{SinkExt, StreamExt};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

/// How often Prometheus would scrape.
const SCRAPE_INTERVAL_MS: u64 = 1000;

#[derive(Parser, Debug)]
#[command(version, about)]
struct Options {
    /// The management listener.
    #[arg(long, default_value = "http://127.0.0.1:15672")]
    url: String,
    #[arg(long, default_value = "guest")]
    user: String,
    #[arg(long, default_value = "guest")]
    password: String,
    /// Stop after this many seconds (default: when signalled).
    #[arg(long)]
    duration: Option<u64>,
}

/// What the observer received.
#[derive(Debug, Default)]
struct Observed {
    ticks: u64,
    /// Ticks that carried the queues table.
    tables: u64,
    feed_bytes: u64,
    scrapes: u64,
    scrape_bytes: u64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let options = Options::parse();
    let cookie = log_in(&options).await?;
    let feed_url = format!("{}/ws", options.url.replacen("http", "ws", 1));
    let mut request = feed_url.as_str().into_client_request().context("feed URL")?;
    request.headers_mut().insert("cookie", cookie.parse().context("session cookie")?);
    let (mut feed, _) = tokio_tungstenite::connect_async(request).await.context("opening the live feed")?;
    let table = serde_json::json!({"sort": "messages", "sort_reverse": true, "page": 1, "page_size": 100});
    let subscribe = serde_json::json!({"type": "subscribe", "queues": table});
    feed.send(Message::Text(subscribe.to_string().into())).await.context("subscribing")?;

    let mut observed = Observed::default();
    let mut scrape = tokio::time::interval(Duration::from_millis(SCRAPE_INTERVAL_MS));
    let deadline = options.duration.map(|secs| Instant::now() + Duration::from_secs(secs));
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).context("SIGTERM handler")?;
    let started = Instant::now();
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        tokio::select! {
            message = feed.next() => match message {
                Some(Ok(Message::Text(text))) => {
                    observed.ticks += 1;
                    observed.feed_bytes += text.len() as u64;
                    let message: serde_json::Value = serde_json::from_str(text.as_str()).context("a feed message")?;
                    observed.tables += u64::from(message["queues"]["items"].is_array());
                }
                Some(Ok(_)) => {}
                Some(Err(error)) => bail!("the live feed failed: {error}"),
                None => bail!("the broker closed the live feed"),
            },
            _ = scrape.tick() => {
                observed.scrape_bytes += scrape_metrics(&options).await?;
                observed.scrapes += 1;
            }
            _ = terminate.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "warren-observer: {:.0} s: {} feed messages ({} queue tables, {} KiB), {} scrapes of both endpoints ({} KiB)",
        secs,
        observed.ticks,
        observed.tables,
        observed.feed_bytes / 1024,
        observed.scrapes,
        observed.scrape_bytes / 1024
    );
    if secs > 3.0 && observed.tables < 2 {
        bail!("the live feed pushed {} queue tables in {secs:.0} s", observed.tables);
    }
    Ok(())
}

/// Logs in as the UI does; returns the session cookie (`name=value`).
async fn log_in(options: &Options) -> Result<String> {
    let url = format!("{}/api/login", options.url);
    let form = serde_json::json!({"username": options.user, "password": options.password});
    let response = tokio::task::spawn_blocking(move || ureq::post(&url).send_json(form).map_err(anyhow::Error::from))
        .await?
        .context("logging in to the management API")?;
    let cookie = response.header("set-cookie").context("the login answer has no session cookie")?;
    Ok(cookie.split(';').next().unwrap_or_default().to_string())
}

/// Scrapes both metrics endpoints; returns the bytes read.
async fn scrape_metrics(options: &Options) -> Result<u64> {
    let base = options.url.clone();
    tokio::task::spawn_blocking(move || {
        let mut bytes = 0;
        for path in ["/metrics", "/metrics/per-object"] {
            let body = ureq::get(&format!("{base}{path}")).call().with_context(|| format!("scraping {path}"))?;
            bytes += body.into_string().with_context(|| format!("reading {path}"))?.len() as u64;
        }
        Ok(bytes)
    })
    .await?
}
