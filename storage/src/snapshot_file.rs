//! A small file replaced atomically as a whole: the store for the broker's definitions.
//!
//! A write goes to a temporary file beside the target, is fsynced, renamed over the target,
//! and the directory is fsynced, so a crash leaves either the old contents or the new ones,
//! never a mix. Its contents are opaque bytes to this crate.

use crate::error::{IoContext, Result, StorageError};
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A file whose every write replaces it atomically.
#[derive(Debug, Clone)]
pub struct SnapshotFile {
    path: PathBuf,
}

impl SnapshotFile {
    /// The snapshot at `path` (its directory is created on the first write).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        SnapshotFile { path: path.into() }
    }

    /// Where it lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The current contents, or `None` if it was never written.
    pub fn read(&self) -> Result<Option<Vec<u8>>> {
        match fs::read(&self.path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(StorageError::from_io(&self.path, source)),
        }
    }

    /// Replaces the contents with `bytes`, durably.
    pub fn write(&self, bytes: &[u8]) -> Result<()> {
        let dir = self.path.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
        fs::create_dir_all(&dir).at(&dir)?;
        let temporary = self.path.with_extension("tmp");
        let mut file = File::create(&temporary).at(&temporary)?;
        file.write_all(bytes).at(&temporary)?;
        file.sync_all().at(&temporary)?;
        fs::rename(&temporary, &self.path).at(&self.path)?;
        File::open(&dir).and_then(|d| d.sync_all()).at(&dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_replaces_and_read_returns_the_last_write() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = SnapshotFile::new(dir.path().join("sub").join("definitions.json"));
        assert_eq!(file.read().expect("read"), None);
        file.write(b"first").expect("write");
        file.write(b"second").expect("write");
        assert_eq!(file.read().expect("read"), Some(b"second".to_vec()));
        assert!(!file.path().with_extension("tmp").exists());
    }
}
