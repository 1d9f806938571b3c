//! Decoding of what frames carry: a method (with its field tables), a field table on its
//! own, and a content header's properties.

use bytes::Bytes;
use warren_delivery::{field_table, Properties};

/// Decodes `data` as each of the three.
pub fn run(data: &[u8]) {
    let _ = amq_protocol::protocol::parse_class(data);
    if field_table::check_wire_table(data).is_ok() {
        let _ = field_table::decode(data);
    }
    let _ = Properties::decode(Bytes::copy_from_slice(data));
}
