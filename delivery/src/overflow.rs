//! `x-overflow`: what a full queue does with one more message. Classic queues and the quorum
//! state machine both obey it; the queue arguments parse it.

/// What a full queue does with one more message (`x-overflow`). (Serialised in a quorum
/// queue's log when a policy sets it: see `quorum::PolicySettings`.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Overflow {
    /// Drop (or dead-letter) the oldest ready messages.
    #[default]
    DropHead,
    /// Refuse the new message (nack under confirms).
    RejectPublish,
    /// Refuse the new message and dead-letter it.
    RejectPublishDlx,
}
