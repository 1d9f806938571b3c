//! Redeclaration: what must match for a declare of an existing exchange or queue to succeed.
//!
//! As in RabbitMQ, only the properties and the arguments the broker interprets are compared;
//! any other argument is free to differ. A mismatch is 406 PRECONDITION_FAILED with a text
//! naming the argument, what was received and what is current.

use crate::error::{BrokerError, BrokerResult};
use crate::exchange::ExchangeDefinition;
use crate::field_value::{string_of, values_equal, Shown};
use crate::queue::{QueueDefinition, ARGUMENTS};
use amq_protocol::types::{AMQPValue, FieldTable};

/// Exchange arguments compared on redeclaration.
const EXCHANGE_ARGUMENTS: &[&str] = &["alternate-exchange", "x-delayed-type"];

fn inequivalent(arg: &str, kind: &str, name: &str, vhost: &str, received: String, current: String) -> BrokerError {
    BrokerError::precondition_failed(format!(
        "inequivalent arg '{arg}' for {kind} '{name}' in vhost '{vhost}': received '{received}' but current is '{current}'"
    ))
}

/// A value as a user wrote it, inside the quotes of an inequivalence text: strings bare.
fn show(value: Option<&AMQPValue>) -> String {
    match value {
        None => "none".to_string(),
        Some(value) => match string_of(value) {
            Some(text) => String::from_utf8_lossy(text).into_owned(),
            None => Shown(value).to_string(),
        },
    }
}

fn check_arguments<'a>(
    keys: impl IntoIterator<Item = &'a str>,
    asked: &FieldTable,
    current: &FieldTable,
    fail: impl Fn(&str, String, String) -> BrokerError,
) -> BrokerResult<()> {
    for key in keys {
        let (received, had) = (asked.inner().get(key), current.inner().get(key));
        let equal = match (received, had) {
            (Some(a), Some(b)) => values_equal(a, b),
            (None, None) => true,
            _ => false,
        };
        if !equal {
            return Err(fail(key, show(received), show(had)));
        }
    }
    Ok(())
}

/// Checks an `exchange.declare` against the existing exchange.
pub(crate) fn check_exchange(
    current: &ExchangeDefinition,
    asked: &ExchangeDefinition,
    vhost: &str,
) -> BrokerResult<()> {
    let fail =
        |arg: &str, received: String, had: String| inequivalent(arg, "exchange", &current.name, vhost, received, had);
    if current.type_name() != asked.type_name() {
        return Err(fail("type", asked.type_name().into(), current.type_name().into()));
    }
    if current.durable != asked.durable {
        return Err(fail("durable", asked.durable.to_string(), current.durable.to_string()));
    }
    if current.auto_delete != asked.auto_delete {
        return Err(fail("auto_delete", asked.auto_delete.to_string(), current.auto_delete.to_string()));
    }
    if current.internal != asked.internal {
        return Err(fail("internal", asked.internal.to_string(), current.internal.to_string()));
    }
    check_arguments(EXCHANGE_ARGUMENTS.iter().copied(), &asked.arguments, &current.arguments, fail)
}

/// Checks a `queue.declare` against the existing queue (exclusivity is checked before).
pub(crate) fn check_queue(current: &QueueDefinition, asked: &QueueDefinition, vhost: &str) -> BrokerResult<()> {
    let fail =
        |arg: &str, received: String, had: String| inequivalent(arg, "queue", &current.name, vhost, received, had);
    if current.durable != asked.durable {
        return Err(fail("durable", asked.durable.to_string(), current.durable.to_string()));
    }
    if current.auto_delete != asked.auto_delete {
        return Err(fail("auto_delete", asked.auto_delete.to_string(), current.auto_delete.to_string()));
    }
    let compared = ARGUMENTS.iter().filter(|a| a.compared_on_redeclare).map(|a| a.name);
    check_arguments(compared, &asked.arguments, &current.arguments, fail)
}
