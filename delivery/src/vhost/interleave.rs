//! Test-only: a pause at a named point of a virtual host's code, so that a test can run a
//! concurrent operation exactly there instead of hoping a race happens.

use parking_lot::Mutex;

/// What runs when the point is reached.
type Action = Box<dyn FnOnce() + Send>;

/// One armed pause: the first time `point` is reached, `action` runs on that thread.
#[derive(Default)]
pub(crate) struct Hook {
    armed: Mutex<Option<(&'static str, Action)>>,
}

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hook").finish_non_exhaustive()
    }
}

impl Hook {
    /// Runs `action` when `point` is next reached (once).
    pub(crate) fn arm(&self, point: &'static str, action: impl FnOnce() + Send + 'static) {
        *self.armed.lock() = Some((point, Box::new(action)));
    }

    /// Called at `point`: runs the action armed for it, if any.
    pub(crate) fn reached(&self, point: &'static str) {
        let action = {
            let mut armed = self.armed.lock();
            match armed.take() {
                Some((at, action)) if at == point => Some(action),
                other => {
                    *armed = other;
                    None
                }
            }
        };
        if let Some(action) = action {
            action();
        }
    }
}
