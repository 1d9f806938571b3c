//! What became of a publish: whether it was routed, what its confirm waits for, and whether
//! a queue refused it. The virtual host's routing makes it; queues that dead-letter and the
//! protocol layer read it.

/// What became of a publish.
#[derive(Debug, Default)]
pub struct PublishOutcome {
    /// Whether it reached (or, when delayed, would now reach) at least one queue.
    pub routed: bool,
    /// Disk writes a publisher confirm must wait for.
    pub marks: Vec<crate::message_store::DurableMark>,
    /// Whether a queue refused it (`x-overflow: reject-publish`): confirms nack.
    pub rejected: bool,
    /// A store that failed to take it.
    pub failure: Option<crate::message_store::StoreError>,
}
