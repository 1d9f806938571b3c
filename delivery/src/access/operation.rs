//! What each operation on exchanges and queues needs of a user's permissions: RabbitMQ's
//! access-control table, written once. AMQP methods and management API routes are both
//! turned into an [`Operation`] and checked by [`Operation::needs`]:
//!
//! | operation | configure | write | read |
//! |---|---|---|---|
//! | declare an exchange | exchange | its alternate exchange, if any | exchange, if it has an alternate |
//! | delete an exchange | exchange | | |
//! | declare a queue | queue | its dead-letter exchange, if any | queue, if it has one |
//! | delete a queue | queue | | |
//! | bind or unbind an exchange to an exchange | | destination | source |
//! | bind or unbind a queue | | queue | exchange |
//! | publish | | exchange | |
//! | consume, get, purge, browse | | | queue |

use super::permission::{Access, Resource};

/// One operation, with the names it touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation<'a> {
    /// `exchange.declare` (not passive), `PUT /api/exchanges/{vhost}/{name}`.
    DeclareExchange {
        /// The exchange.
        exchange: &'a str,
        /// Its `alternate-exchange` argument, if any.
        alternate: Option<&'a str>,
    },
    /// `exchange.delete`.
    DeleteExchange {
        /// The exchange.
        exchange: &'a str,
    },
    /// `queue.declare` (not passive).
    DeclareQueue {
        /// The queue.
        queue: &'a str,
        /// Its `x-dead-letter-exchange` argument, if any.
        dead_letter_exchange: Option<&'a str>,
    },
    /// `queue.delete`.
    DeleteQueue {
        /// The queue.
        queue: &'a str,
    },
    /// `exchange.bind` or `exchange.unbind`.
    BindExchange {
        /// Where messages come from.
        source: &'a str,
        /// Where they go.
        destination: &'a str,
    },
    /// `queue.bind` or `queue.unbind`.
    BindQueue {
        /// Where messages come from.
        exchange: &'a str,
        /// Where they go.
        queue: &'a str,
    },
    /// `basic.publish`.
    Publish {
        /// The exchange ("" is the default exchange).
        exchange: &'a str,
    },
    /// A publish straight to a queue, not through an exchange (the Stream protocol's).
    WriteQueue {
        /// The queue (a stream).
        queue: &'a str,
    },
    /// `basic.consume`, `basic.get`, `queue.purge`, and reading a queue's log by offset.
    Read {
        /// The queue.
        queue: &'a str,
    },
}

impl<'a> Operation<'a> {
    /// The permissions the operation needs, each on the resource it names.
    pub fn needs(&self) -> Vec<(Access, Resource<'a>)> {
        use Access::{Configure, Read, Write};
        use Resource::{Exchange, Queue};
        match *self {
            Operation::DeclareExchange { exchange, alternate: Some(alternate) } => {
                vec![(Configure, Exchange(exchange)), (Write, Exchange(alternate)), (Read, Exchange(exchange))]
            }
            Operation::DeclareExchange { exchange, alternate: None } | Operation::DeleteExchange { exchange } => {
                vec![(Configure, Exchange(exchange))]
            }
            Operation::DeclareQueue { queue, dead_letter_exchange: Some(exchange) } => {
                vec![(Configure, Queue(queue)), (Write, Exchange(exchange)), (Read, Queue(queue))]
            }
            Operation::DeclareQueue { queue, dead_letter_exchange: None } | Operation::DeleteQueue { queue } => {
                vec![(Configure, Queue(queue))]
            }
            Operation::BindExchange { source, destination } => {
                vec![(Write, Exchange(destination)), (Read, Exchange(source))]
            }
            Operation::BindQueue { exchange, queue } => vec![(Write, Queue(queue)), (Read, Exchange(exchange))],
            Operation::Publish { exchange } => vec![(Write, Exchange(exchange))],
            Operation::WriteQueue { queue } => vec![(Write, Queue(queue))],
            Operation::Read { queue } => vec![(Read, Queue(queue))],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_that_name_other_exchanges_add_their_checks() {
        let plain = Operation::DeclareQueue { queue: "q", dead_letter_exchange: None };
        assert_eq!(plain.needs(), vec![(Access::Configure, Resource::Queue("q"))]);
        let with_dlx = Operation::DeclareQueue { queue: "q", dead_letter_exchange: Some("dlx") };
        assert!(with_dlx.needs().contains(&(Access::Write, Resource::Exchange("dlx"))));
        assert!(with_dlx.needs().contains(&(Access::Read, Resource::Queue("q"))));
        let with_alternate = Operation::DeclareExchange { exchange: "x", alternate: Some("ae") };
        assert!(with_alternate.needs().contains(&(Access::Write, Resource::Exchange("ae"))));
    }

    #[test]
    fn binding_writes_the_destination_and_reads_the_source() {
        let bind = Operation::BindQueue { exchange: "x", queue: "q" };
        assert_eq!(bind.needs(), vec![(Access::Write, Resource::Queue("q")), (Access::Read, Resource::Exchange("x"))]);
    }
}
