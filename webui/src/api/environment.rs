//! `GET /api/environment` (Warren's, as `rabbitmqctl environment` prints a node's application
//! environment): this node's settings, each with its value and where it came from, and its
//! configuration file, data directory and log file (which `/api/nodes` shows too, with
//! RabbitMQ's names). Administrators only: the settings name files and addresses.

use super::Management;
use crate::authorization::Rule;
use crate::route_table::RouteTable;
use axum::extract::State;
use axum::Json;
use serde_json::{json, Map, Value};
use std::path::PathBuf;

/// One setting as the server resolved it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvironmentSetting {
    /// Its key in the TOML file.
    pub key: String,
    /// Its value as text (lists comma-separated; secrets hidden).
    pub value: String,
    /// Where it came from: `default`, `environment`, `flag or file`.
    pub source: &'static str,
}

/// This node's environment, as the server knows it.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    /// The settings.
    pub settings: Vec<EnvironmentSetting>,
    /// The configuration file, if any.
    pub config_file: Option<PathBuf>,
    /// The data directory.
    pub data_dir: PathBuf,
    /// The log file, if the log goes to one.
    pub log_file: Option<PathBuf>,
}

/// The environment route.
pub(super) fn routes(table: &mut RouteTable) {
    table.get("/api/environment", Rule::Administrator, environment);
}

impl Environment {
    /// RabbitMQ's node fields for the files: `config_files`, `db_dir`, `log_files`.
    pub(crate) fn node_fields(&self) -> (Vec<String>, String, Vec<String>) {
        let shown = |path: &PathBuf| std::path::absolute(path).unwrap_or_else(|_| path.clone()).display().to_string();
        (self.config_file.iter().map(shown).collect(), shown(&self.data_dir), self.log_file.iter().map(shown).collect())
    }
}

async fn environment(State(api): State<Management>) -> Json<Value> {
    let environment = api.environment();
    let (config_files, db_dir, log_files) = environment.node_fields();
    let settings: Map<String, Value> =
        environment.settings.iter().map(|s| (s.key.clone(), json!({ "value": s.value, "source": s.source }))).collect();
    Json(json!({
        "node": api.node(),
        "config_files": config_files,
        "db_dir": db_dir,
        "log_files": log_files,
        "settings": settings,
    }))
}
