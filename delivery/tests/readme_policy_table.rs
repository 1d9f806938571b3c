//! README's policy table is `POLICY_KEYS`: every key a policy may hold, which value wins against
//! a queue's own argument per kind of queue, what it does on exchanges, and whether an operator
//! policy may set it. A key added without its row fails this test; `UPDATE_README=1 cargo test
//! -p warren-delivery --test readme_policy_table` rewrites the table.

use warren_delivery::policy::{Effect, Merge, PolicyKey, POLICY_KEYS};
use warren_delivery::queue::QueueType;

const BEGIN: &str = "<!-- policy table: begin -->";
const END: &str = "<!-- policy table: end -->";

/// What the key does on queues of `kind`.
fn on_queue(key: &PolicyKey, kind: QueueType) -> &'static str {
    if !key.supported_by(kind) {
        return "not supported: the policy does not apply";
    }
    match key.effect {
        Effect::QueueArgument { argument, precedence } if kind.interprets(argument) => precedence(kind).describe(),
        _ => "no effect",
    }
}

fn on_exchange(key: &PolicyKey) -> &'static str {
    match key.effect {
        Effect::AlternateExchange => "the argument",
        _ => "no effect",
    }
}

fn operator(key: &PolicyKey) -> &'static str {
    match key.operator {
        None => "no",
        Some(Merge::Lower) => "yes: the lower value",
        Some(Merge::Higher) => "yes: the higher value",
        Some(Merge::Operator) => "yes: the operator's value",
    }
}

fn table() -> String {
    let mut text = String::from(
        "| key | classic queue | quorum queue | stream | exchange | operator policy |\n| --- | --- | --- | --- | --- | --- |\n",
    );
    for key in POLICY_KEYS {
        let name = key.name.strip_suffix('*').map_or(key.name.to_string(), |prefix| format!("{prefix}…"));
        text.push_str(&format!(
            "| `{name}` | {} | {} | {} | {} | {} |\n",
            on_queue(key, QueueType::Classic),
            on_queue(key, QueueType::Quorum),
            on_queue(key, QueueType::Stream),
            on_exchange(key),
            operator(key)
        ));
    }
    text
}

#[test]
fn readme_lists_every_policy_key_with_its_rules() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
    let readme = std::fs::read_to_string(path).expect("README.md is readable");
    let (before, rest) = readme.split_once(BEGIN).expect("README has the policy table's begin marker");
    let (shown, after) = rest.split_once(END).expect("README has the policy table's end marker");
    let expected = table();
    if std::env::var_os("UPDATE_README").is_some() {
        std::fs::write(path, format!("{before}{BEGIN}\n{expected}{END}{after}")).expect("README.md is writable");
        return;
    }
    assert_eq!(
        shown.trim(),
        expected.trim(),
        "README's policy table is stale: run UPDATE_README=1 cargo test -p warren-delivery --test readme_policy_table"
    );
}
