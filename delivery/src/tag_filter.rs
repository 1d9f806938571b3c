//! Stream filtering's message tags: the `x-stream-filter-value` header a publisher sets, and
//! the filter (`x-stream-filter`, `x-stream-match-unfiltered`) a consumer reads with. Plain
//! values shared by consumers, streams, the quorum state machine and log reads.

use crate::field_value::string_of;
use crate::message::Message;

/// The header that carries a message's tag, as RabbitMQ's stream filtering names it.
pub const TAG_HEADER: &str = "x-stream-filter-value";

/// Which tagged messages a consumer wants.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TagFilter {
    tags: Vec<Vec<u8>>,
    match_unfiltered: bool,
}

impl TagFilter {
    /// A filter wanting `tags` (and untagged messages if `match_unfiltered`).
    pub fn new(tags: Vec<Vec<u8>>, match_unfiltered: bool) -> Self {
        TagFilter { tags, match_unfiltered }
    }

    /// The tags wanted.
    pub fn tags(&self) -> &[Vec<u8>] {
        &self.tags
    }

    /// Whether messages without a tag are wanted too.
    pub fn match_unfiltered(&self) -> bool {
        self.match_unfiltered
    }

    /// Whether a message with this tag (or none) is wanted.
    pub fn matches(&self, tag: Option<&[u8]>) -> bool {
        match tag {
            Some(tag) => self.tags.iter().any(|t| t == tag),
            None => self.match_unfiltered,
        }
    }
}

/// A message's tag: its `x-stream-filter-value` header.
pub fn message_tag(message: &Message) -> Option<&[u8]> {
    tag_of(&message.properties)
}

/// The tag in a message's properties: its `x-stream-filter-value` header.
pub fn tag_of(properties: &crate::properties::Properties) -> Option<&[u8]> {
    properties.headers().and_then(|h| h.inner().get(TAG_HEADER)).and_then(string_of)
}
