//! The two engines behind one face: the run connects and runs producers and consumers through
//! these, the same way whichever engine `--engine` picks (lapin, or the raw engine of
//! [`raw`](super::raw)).

use super::consumer::{self, AckPlan, ConsumerReport};
use super::options::Engine;
use super::producer::{self, PublishPlan};
use super::raw;
use super::stats::Counters;
use super::topology::Topology;
use lapin::types::{FieldTable, ShortString};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use tokio::sync::watch;

/// A connected consumer of either engine (lapin's boxed: it is several times larger).
pub enum Consumer {
    Lapin(Box<consumer::Consumer>),
    Raw(raw::Consumer),
}

impl Consumer {
    /// Connects consumer `id` to `queue`: basic.qos (if a prefetch is set), then basic.consume
    /// with `arguments`.
    pub async fn connect(
        engine: Engine,
        id: usize,
        uri: &str,
        queue: ShortString,
        plan: AckPlan,
        arguments: FieldTable,
    ) -> anyhow::Result<Self> {
        Ok(match engine {
            Engine::Lapin => {
                Consumer::Lapin(Box::new(consumer::Consumer::connect(id, uri, queue, plan, arguments).await?))
            }
            Engine::Raw => Consumer::Raw(raw::Consumer::connect(id, uri, queue, plan, arguments).await?),
        })
    }

    /// Consumes until `stop` turns true.
    pub async fn run(self, counters: Arc<Counters>, stop: watch::Receiver<bool>) -> anyhow::Result<ConsumerReport> {
        match self {
            Consumer::Lapin(consumer) => consumer.run(counters, stop).await,
            Consumer::Raw(consumer) => consumer.run(counters, stop).await,
        }
    }
}

/// A connected producer of either engine (both boxed: their sizes differ).
pub enum Producer {
    Lapin(Box<producer::Producer>),
    Raw(Box<raw::Producer>),
}

impl Producer {
    /// Connects producer `id` (confirm.select if the plan has a confirm window).
    pub async fn connect(
        engine: Engine,
        id: usize,
        uri: &str,
        topology: Topology,
        plan: PublishPlan,
    ) -> anyhow::Result<Self> {
        Ok(match engine {
            Engine::Lapin => Producer::Lapin(Box::new(producer::Producer::connect(id, uri, topology, plan).await?)),
            Engine::Raw => Producer::Raw(Box::new(raw::Producer::connect(id, uri, topology, plan).await?)),
        })
    }

    /// Publishes until the plan's count is reached or `stop` is set, confirms included.
    pub async fn run(self, counters: Arc<Counters>, stop: Arc<AtomicBool>) -> anyhow::Result<()> {
        match self {
            Producer::Lapin(producer) => producer.run(counters, stop).await,
            Producer::Raw(producer) => producer.run(counters, stop).await,
        }
    }
}
