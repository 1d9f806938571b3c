//! Recording the changes of a virtual host's durable definitions: the set in memory
//! ([`DurableSet`]), the journal its changes are appended to ([`ChangeJournal`]) and the
//! generations of the definitions file the journal is folded into.

use super::journal::ChangeJournal;
use super::{reading, Definitions, DefinitionsChange, DefinitionsError, DurableSet, VhostStorage};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The journal of generation N is `definitions.N.journal`: the definitions file names the
/// generation whose changes follow it, so a crash between writing the file and starting the
/// next journal leaves one consistent pair.
const JOURNAL_PREFIX: &str = "definitions.";
const JOURNAL_SUFFIX: &str = ".journal";
/// The journal is folded into the definitions file once it holds this many records, or as
/// many as the file does if that is more: rewriting the file then costs as much as the
/// appends it replaces, so a change costs O(1) on average however many definitions exist.
const COMPACT_AFTER_MIN_RECORDS: usize = 4096;

/// The durable definitions in memory and the journal of their changes since the file.
#[derive(Debug)]
pub(super) struct Recorded {
    set: DurableSet,
    generation: u64,
    journal: ChangeJournal,
    /// [`COMPACT_AFTER_MIN_RECORDS`] (tests lower it).
    compact_after_min_records: usize,
}

/// The definitions file as written: the generation of the journal that follows it, then the
/// records.
#[derive(Serialize)]
struct DefinitionsDocument<'a> {
    journal: u64,
    #[serde(flatten)]
    definitions: &'a Definitions,
}

/// A change appended to the journal but maybe not yet on disk: [`PendingChange::wait`] makes
/// it durable. It is taken while the virtual host's lock orders the change, and waited for
/// after, so that concurrent changes share their syncs.
#[derive(Debug, Default)]
#[must_use = "a change is durable only once waited for"]
pub struct PendingChange {
    journal: Option<(Arc<std::fs::File>, PathBuf)>,
}

impl PendingChange {
    /// Whether there is nothing to wait for (nothing was appended).
    pub fn is_empty(&self) -> bool {
        self.journal.is_none()
    }

    /// Waits until the change is on disk.
    pub fn wait(self) -> Result<(), DefinitionsError> {
        let Some((file, path)) = self.journal else { return Ok(()) };
        file.sync_data().map_err(|source| DefinitionsError::Journal { path, source })
    }
}

impl VhostStorage {
    /// Starts recording changes over `kept`, the definitions restored (what [`load`] read,
    /// less what was left out): writes them as the definitions file of a new generation with
    /// an empty journal, so the next start reads no stale journal. A journal whose reading
    /// stopped at damage (`damage`: the byte, and why) is kept aside, not removed.
    ///
    /// [`load`]: VhostStorage::load
    pub fn start_recording(
        &self,
        kept: &Definitions,
        generation: u64,
        damage: Option<&(u64, String)>,
    ) -> Result<(), DefinitionsError> {
        let old = self.journal_path(generation);
        if let Some((byte, why)) = damage {
            let aside = old.with_extension(format!("journal.damaged-{}", self.unused_stamp().0));
            tracing::warn!(
                journal = %old.display(),
                byte,
                why = %why,
                kept_at = %aside.display(),
                "the definitions journal ends in a record that was never completed (a crash while it was written): \
                 the changes before it are kept, the rest is set aside"
            );
            std::fs::rename(&old, &aside).map_err(|source| DefinitionsError::Journal { path: old.clone(), source })?;
        }
        let mut recorded = self.recorded.lock();
        let set = DurableSet::of(kept.clone());
        let journal = self.write_generation(&set, generation + 1)?;
        *recorded = Some(Recorded {
            set,
            generation: generation + 1,
            journal,
            compact_after_min_records: COMPACT_AFTER_MIN_RECORDS,
        });
        remove_journal(&old);
        Ok(())
    }

    /// Applies `change` to the durable set and appends it to the journal (nothing happens
    /// before [`VhostStorage::start_recording`], or if the set already holds it). Once the
    /// journal is as long as the set, the definitions file is rewritten instead.
    pub fn record(&self, change: DefinitionsChange) -> Result<PendingChange, DefinitionsError> {
        let mut guard = self.recorded.lock();
        let Some(recorded) = guard.as_mut() else { return Ok(PendingChange::default()) };
        if let Err(reason) = change.check_depth() {
            tracing::error!(
                reason = %reading::shown(&reason),
                "not saving a definition that could not be read back: it will not survive a restart"
            );
            return Ok(PendingChange::default());
        }
        if !recorded.set.apply(change.clone()) {
            return Ok(PendingChange::default());
        }
        if recorded.journal.records() >= recorded.set.len().max(recorded.compact_after_min_records) {
            self.compact(recorded)?;
            return Ok(PendingChange::default());
        }
        let path = recorded.journal.path().to_path_buf();
        recorded.journal.append(&change).map_err(|source| DefinitionsError::Journal { path: path.clone(), source })?;
        if self.catalog_owned {
            // The catalog's log holds it already; its checkpoints sync the journal.
            return Ok(PendingChange::default());
        }
        Ok(PendingChange { journal: Some((recorded.journal.file(), path)) })
    }

    /// Makes every change recorded so far durable (a catalog's checkpoint).
    pub fn sync(&self) -> Result<(), DefinitionsError> {
        let journal = self
            .recorded
            .lock()
            .as_ref()
            .map(|recorded| (recorded.journal.file(), recorded.journal.path().to_path_buf()));
        PendingChange { journal }.wait()
    }

    /// Folds the journal into the definitions file now (a clean stop does, so that the
    /// file alone holds everything).
    pub fn compact_now(&self) -> Result<(), DefinitionsError> {
        match self.recorded.lock().as_mut() {
            Some(recorded) if recorded.journal.records() > 0 => self.compact(recorded),
            _ => Ok(()),
        }
    }

    /// The definitions as recorded.
    #[cfg(test)]
    pub fn recorded(&self) -> Option<Definitions> {
        self.recorded.lock().as_ref().map(|recorded| recorded.set.definitions())
    }

    /// Folds the journal after `records` (at least; more if the set is larger).
    #[cfg(test)]
    pub fn compact_after_min_records_for_tests(&self, records: usize) {
        if let Some(recorded) = self.recorded.lock().as_mut() {
            recorded.compact_after_min_records = records;
        }
    }

    fn compact(&self, recorded: &mut Recorded) -> Result<(), DefinitionsError> {
        let old = recorded.journal.path().to_path_buf();
        recorded.journal = self.write_generation(&recorded.set, recorded.generation + 1)?;
        recorded.generation += 1;
        remove_journal(&old);
        Ok(())
    }

    /// Writes `set` as the definitions file of generation `generation`, then starts that
    /// generation's (empty) journal. A record nested deeper than the protocol accepts is not
    /// saved (and logged), so that the file can always be read back.
    fn write_generation(&self, set: &DurableSet, generation: u64) -> Result<ChangeJournal, DefinitionsError> {
        let mut definitions = set.definitions();
        reading::drop_too_deep(&mut definitions);
        let document = DefinitionsDocument { journal: generation, definitions: &definitions };
        let bytes = serde_json::to_vec_pretty(&document).map_err(|e| DefinitionsError::Encode {
            path: self.definitions.path().to_path_buf(),
            message: e.to_string(),
        })?;
        self.definitions.write(&bytes)?;
        let path = self.journal_path(generation);
        ChangeJournal::create(&path).map_err(|source| DefinitionsError::Journal { path, source })
    }

    pub(super) fn journal_path(&self, generation: u64) -> PathBuf {
        self.dir.join(format!("{JOURNAL_PREFIX}{generation}{JOURNAL_SUFFIX}"))
    }
}

/// Removes a journal whose changes are in the definitions file now.
fn remove_journal(path: &Path) {
    if let Err(error) = std::fs::remove_file(path) {
        if error.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(journal = %path.display(), %error, "cannot remove a definitions journal no longer needed");
        }
    }
}
