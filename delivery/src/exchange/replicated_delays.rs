//! A durable delayed exchange in a cluster: its pending set is the replicated state of a Raft
//! group of its own, so that its messages survive the loss of the node that took them.
//!
//! The group runs a quorum queue's state machine with [`Settings::delayed_exchange`]: a held
//! message "expires" at its `x-delay` after the leader's clock when it was proposed, and an
//! expired message is dead-lettered at least once, that is, kept until it is recorded as
//! handed on. Only the group's leader fires: a timer proposes [`Op::Expire`] once the earliest
//! message is due (the state expires nothing before its time: a command carries the leader's
//! clock, stamped when it is written), and for each message the state then hands on, the
//! leader routes it by the exchange's bindings, waits for its targets to have it, and proposes
//! [`Op::DeadLettered`]. A leader that dies between routing a message and recording it leaves
//! it pending: the next leader routes it again. So a message is never fired early and never
//! lost, and may be routed twice across a failover; such second routings are counted
//! ([`refired_total`], the metric `warren_delayed_refired_total`).
//!
//! A new leader routes nothing before it has caught up with the definitions
//! ([`DefinitionsFence`]).

use super::delayed::HeldMessages;
use crate::catalog::DefinitionsFence;
use crate::clock::now_ms;
use crate::message::{Message, WireMessage};
use crate::message_store::{DurableMark, StoreError};
use crate::quorum::{
    AppliedEffects, Effect, GroupError, InitialMembers, MessageId, Op, QuorumGroup, QuorumStateMachine, Replication,
    Settings, DEFAULT_CHECKPOINT_INTERVAL_ENTRIES,
};
use crate::scheduler::{DelayedTarget, SchedulerHandle, TimerEvent};
use crate::vhost::VirtualHost;
use openraft::ServerState;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::mpsc;
use warren_storage::LogConfig;

/// How long a leader waits before routing again a due message its targets did not take.
const ROUTE_RETRY_MS: u64 = 1_000;
/// How often the leader checks that its timer is armed for the earliest message (a message
/// taken by a node that died before its own timer fired has no other).
const LEADER_CHECK_INTERVAL_MS: u64 = 1_000;
/// Effects handled in one go.
const EFFECTS_BATCH: usize = 256;

static REFIRED: AtomicU64 = AtomicU64::new(0);

/// Due messages routed again by a new leader since the broker started: each may have been
/// routed by the leader before it (a kill between routing and recording), so this bounds the
/// messages routed twice.
pub fn refired_total() -> u64 {
    REFIRED.load(Ordering::Relaxed)
}

/// The replicated pending set of a durable delayed exchange (see the module documentation).
pub struct ReplicatedDelays {
    exchange: String,
    vhost: Weak<VirtualHost>,
    scheduler: SchedulerHandle,
    group: QuorumGroup,
    /// When this node's timer is armed for, if it is.
    timer_ms: Mutex<Option<u64>>,
    /// Messages this node is routing now (one leader routes each once).
    firing: Mutex<HashSet<MessageId>>,
    /// Passed once per term before this node routes as the leader.
    fence: DefinitionsFence,
    deleted: AtomicBool,
    me: Weak<ReplicatedDelays>,
}

impl std::fmt::Debug for ReplicatedDelays {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicatedDelays").field("exchange", &self.exchange).finish_non_exhaustive()
    }
}

/// The name of a replicated delayed exchange's group, unique in the cluster (its planned
/// members are kept under it too).
pub fn group_name(vhost: &str, exchange: &str) -> String {
    format!("delayed:{vhost}:{exchange}")
}

impl ReplicatedDelays {
    /// This node's member of the group of delayed exchange `exchange` of `vhost_name`, kept in
    /// `dir`; a new group (`members` given) is initialized by the member they name.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        exchange: &str,
        vhost_name: &str,
        vhost: Weak<VirtualHost>,
        scheduler: SchedulerHandle,
        dir: &Path,
        log_config: LogConfig,
        replication: Arc<dyn Replication>,
        members: Option<InitialMembers>,
    ) -> Result<Arc<Self>, GroupError> {
        let (effects_tx, effects_rx) = mpsc::unbounded_channel();
        let snapshot = crate::quorum::snapshot_path(dir);
        let name = group_name(vhost_name, exchange);
        let machine = QuorumStateMachine::open(
            &name,
            snapshot,
            Settings::delayed_exchange(),
            DEFAULT_CHECKPOINT_INTERVAL_ENTRIES,
            effects_tx,
        )?;
        let group = QuorumGroup::open(&name, dir, log_config, machine, replication, members)?;
        let delays = Arc::new_cyclic(|me| ReplicatedDelays {
            exchange: exchange.to_string(),
            vhost,
            scheduler,
            group,
            timer_ms: Mutex::new(None),
            firing: Mutex::new(HashSet::new()),
            fence: DefinitionsFence::default(),
            deleted: AtomicBool::new(false),
            me: Weak::clone(me),
        });
        tokio::spawn(act_on_effects(Arc::downgrade(&delays), effects_rx));
        tokio::spawn(lead(Arc::downgrade(&delays)));
        Ok(delays)
    }

    /// Arms this node's timer for `at_ms`, unless it is armed for then or earlier.
    fn arm(&self, at_ms: u64) {
        let mut armed = self.timer_ms.lock();
        if self.deleted.load(Ordering::Acquire) || armed.is_some_and(|at| at <= at_ms) {
            return;
        }
        *armed = Some(at_ms);
        let target: Weak<dyn DelayedTarget> = Weak::clone(&self.me) as Weak<dyn DelayedTarget>;
        self.scheduler.schedule(at_ms, TimerEvent::Delayed { target, key: 0, due_ms: at_ms });
    }

    /// Arms the timer for the earliest message held, if any.
    fn arm_for_earliest(&self) {
        if let Some(at) = self.group.machine().read(|state| state.next_expiry_ms()) {
            self.arm(at);
        }
    }

    /// Leading: routes each message the state hands on (once per leader), then re-arms.
    fn act(self: &Arc<Self>, applied: Vec<AppliedEffects>) {
        if self.deleted.load(Ordering::Acquire) || !self.group.is_leader() {
            return;
        }
        for effect in applied.into_iter().flat_map(|applied| applied.effects) {
            if let Effect::DeadLetter { id, .. } = effect {
                self.hand_on(id);
            }
        }
        self.arm_for_earliest();
    }

    /// Routes message `id` until its targets have it, then records it as handed on.
    fn hand_on(self: &Arc<Self>, id: MessageId) {
        if !self.firing.lock().insert(id) {
            return;
        }
        tokio::spawn(route_until_taken(Arc::downgrade(self), id));
    }

    /// The message `id`, routed once; `true` once its targets have it, or refused it (a
    /// queue at its length limit with `reject-publish`, as a publish is refused: routing it
    /// again would only copy it again to the targets that took it), or it cannot be read (it
    /// is then dropped, and logged).
    async fn route_once(&self, id: MessageId) -> bool {
        let message = match self.group.message(id) {
            Ok(message) => Message::clone(&message),
            Err(error) => {
                tracing::error!(exchange = self.exchange, id, %error, "cannot read a due delayed message; dropped");
                return true;
            }
        };
        let Some(vhost) = self.vhost.upgrade() else { return false };
        if !self.fence.pass(self.group.leader_term(), &vhost).await {
            return false;
        }
        let Some(marks) = vhost.route_due(&self.exchange, message) else { return false };
        let mut taken = true;
        for mark in &marks {
            taken &= matches!(mark.wait().await, Ok(()) | Err(StoreError::Refused));
        }
        taken
    }
}

/// Routes `id` until its targets have it, while this node leads; then proposes it fired.
async fn route_until_taken(delays: Weak<ReplicatedDelays>, id: MessageId) {
    loop {
        let Some(current) = delays.upgrade() else { return };
        if current.deleted.load(Ordering::Acquire) || !current.group.is_leader() {
            current.firing.lock().remove(&id);
            return;
        }
        if current.route_once(id).await {
            current.group.propose(Op::DeadLettered { ids: vec![id] });
            current.firing.lock().remove(&id);
            return;
        }
        drop(current);
        tokio::time::sleep(Duration::from_millis(ROUTE_RETRY_MS)).await;
    }
}

/// Runs the effects of applied entries, in order, for as long as the exchange lives.
async fn act_on_effects(delays: Weak<ReplicatedDelays>, mut effects: mpsc::UnboundedReceiver<AppliedEffects>) {
    let mut batch = Vec::new();
    while effects.recv_many(&mut batch, EFFECTS_BATCH).await > 0 {
        let Some(delays) = delays.upgrade() else { return };
        delays.act(std::mem::take(&mut batch));
    }
}

/// Whenever this node becomes the group's leader: the messages handed on and not recorded
/// (by a leader before it) are routed again, and the timer is armed. While it leads, the
/// timer is checked every [`LEADER_CHECK_INTERVAL_MS`].
async fn lead(delays: Weak<ReplicatedDelays>) {
    let Some(running) = delays.upgrade() else { return };
    let Ok(raft) = running.group.running().await else { return };
    drop(running);
    let mut metrics = raft.server_metrics();
    let mut leading = false;
    let mut check = tokio::time::interval(Duration::from_millis(LEADER_CHECK_INTERVAL_MS));
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let now_leading = metrics.borrow_and_update().state == ServerState::Leader;
        let Some(current) = delays.upgrade() else { return };
        if now_leading && !leading {
            let pending = current.group.machine().read(|state| state.dead_lettering());
            REFIRED.fetch_add(pending.len() as u64, Ordering::Relaxed);
            for (id, _) in pending {
                current.hand_on(id);
            }
        }
        if now_leading {
            current.arm_for_earliest();
        }
        leading = now_leading;
        drop(current);
        tokio::select! {
            changed = metrics.changed() => if changed.is_err() { return },
            _ = check.tick(), if leading => {}
        }
    }
}

impl DelayedTarget for ReplicatedDelays {
    /// The timer rang: whatever is due expires (through the leader, at its clock).
    fn fire(&self, _keys: &[u64]) {
        *self.timer_ms.lock() = None;
        if !self.deleted.load(Ordering::Acquire) {
            self.group.propose(Op::Expire);
        }
    }
}

impl HeldMessages for ReplicatedDelays {
    /// Proposes the message to the group; the confirm waits for its commit. This node's timer
    /// is armed for it (the leader's also covers it, once it learns of it).
    fn hold(&self, message: &Arc<Message>, delay_ms: u64) -> Result<Option<DurableMark>, StoreError> {
        let mark = self.group.enqueue(WireMessage::of(message));
        self.arm(now_ms().saturating_add(delay_ms));
        Ok(Some(mark))
    }

    fn pending(&self) -> u64 {
        self.group.machine().read(|state| state.ready_count() + state.dead_lettering().len() as u64)
    }

    fn close(&self) {
        self.group.close();
    }

    fn destroy(&self) {
        self.deleted.store(true, Ordering::Release);
        self.group.destroy();
    }
}
