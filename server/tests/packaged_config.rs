//! The Debian package's configuration file (`server/debian/warren.toml`, installed as the conffile
//! `/etc/warren/warren.toml`) is made from the settings' one declaration
//! (`warren_server::config::Cli`): every setting the file may hold, with its meaning, flag,
//! environment variable and default, commented out at its default, so that an operator changes
//! a setting by uncommenting its line. The package sets one setting of its own, the data
//! directory it creates. A setting added without its lines fails this test; `UPDATE_PACKAGE=1
//! cargo test -p warren-server --test packaged_config` rewrites the file.

use clap::{Arg, CommandFactory};
use std::collections::BTreeSet;
use std::path::Path;
use warren_server::config::{is_file_setting, Cli};
use warren_server::Config;

/// The file in the source tree, and where the package installs it.
const PACKAGED_CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/debian/warren.toml");
const CONFFILE: &str = "/etc/warren/warren.toml";
/// The service's unit and the crate's manifest (whose `[package.metadata.deb]` lists the files).
const UNIT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/debian/warren.service");
const MANIFEST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
/// The data directory postinst creates for the `warren` user, the only one the unit lets the
/// broker write to.
const PACKAGE_DATA_DIR: &str = "/var/lib/warren";
/// The settings the package gives a value of its own, uncommented: key, value, why.
const PACKAGE_SETTINGS: &[(&str, &str, &str)] = &[(
    "data_dir",
    PACKAGE_DATA_DIR,
    "the directory the package creates for the warren user, the only one warren.service may write to",
)];
/// The sentence of a setting's help that gives its default when clap's would not do (it is
/// computed when the broker starts, or there is none), as in README's settings table.
const DEFAULT_SENTENCE: &str = "Default: ";
/// Comment lines are wrapped to this width.
const WIDTH: usize = 100;
/// What the loader says of a key that is not a setting (config.rs, `file_arguments`).
const UNKNOWN_KEY: &str = "unknown key";

const HEADER: &str = "\
# Warren's configuration, read by warren.service (`warren --config /etc/warren/warren.toml`).
# Every setting of the broker is below with its meaning, flag, environment variable and default,
# commented out at its default, except data_dir, which the package sets. Uncomment a line to
# change a setting, then `systemctl restart warren`. A flag beats this file, and this file beats
# the WARREN_* environment variables; the log level comes from RUST_LOG. The service may write
# only in /var/lib/warren (warren.service's ReadWritePaths): put a log_file there, or add its
# directory with `systemctl edit warren`.
#
# Made from the settings' declaration (server/src/config.rs) by server/tests/packaged_config.rs:
# `UPDATE_PACKAGE=1 cargo test -p warren-server --test packaged_config` writes it again.
";

/// The settings the file holds: every one the loader reads but the test-only (hidden) ones.
fn settings() -> Vec<Arg> {
    Cli::command().get_arguments().filter(|arg| is_file_setting(arg) && !arg.is_hide_set()).cloned().collect()
}

/// A flag that may be given without a value (`--ssl-fail-if-no-peer-cert` is `=true`).
fn is_switch(arg: &Arg) -> bool {
    arg.get_num_args().is_some_and(|range| range.min_values() == 0)
}

fn is_list(arg: &Arg) -> bool {
    arg.get_value_delimiter() == Some(',')
}

/// The help as one line, without its "Default: ..." sentence, and that sentence's default if it
/// has one.
fn meaning_and_stated_default(arg: &Arg) -> (String, Option<String>) {
    let help = arg.get_long_help().or(arg.get_help()).map(|help| help.to_string()).unwrap_or_default();
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    match help.split_once(DEFAULT_SENTENCE) {
        Some((meaning, default)) => {
            let (default, rest) = default.split_once(". ").unwrap_or((default.trim_end_matches('.'), ""));
            (format!("{} {rest}", meaning.trim_end()).trim().to_string(), Some(default.to_string()))
        }
        None => (help, None),
    }
}

/// A flag's value as the TOML value the loader reads back as it: a number, a boolean, a list of
/// strings for a comma-separated flag, or else a string.
fn toml_value(arg: &Arg, text: &str) -> toml::Value {
    if is_list(arg) {
        return toml::Value::Array(text.split(',').map(|item| toml::Value::String(item.to_string())).collect());
    }
    if let Ok(n) = text.parse::<i64>() {
        return toml::Value::Integer(n);
    }
    if text.contains('.') {
        if let Ok(f) = text.parse::<f64>() {
            if format!("{f:?}") == text {
                return toml::Value::Float(f);
            }
        }
    }
    match text {
        "true" => toml::Value::Boolean(true),
        "false" if is_switch(arg) => toml::Value::Boolean(false),
        _ => toml::Value::String(text.to_string()),
    }
}

/// `# `-prefixed lines of at most [`WIDTH`] characters.
fn comment(text: &str) -> String {
    let mut lines = Vec::new();
    let mut line = String::from("#");
    for word in text.split_whitespace() {
        if line.len() > 1 && line.len() + 1 + word.len() > WIDTH {
            lines.push(std::mem::replace(&mut line, String::from("#")));
        }
        line.push(' ');
        line.push_str(word);
    }
    lines.push(line);
    lines.iter().map(|line| format!("{line}\n")).collect()
}

/// The file as the declarations make it.
fn packaged_config() -> String {
    let mut text = String::from(HEADER);
    for arg in settings() {
        let key = arg.get_id().as_str();
        let (meaning, stated) = meaning_and_stated_default(&arg);
        let declared: Vec<String> = arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
        // A setting whose default is stated in words (computed at start, or none) gets its
        // value's name as a placeholder, quoted so that the uncommented file stays TOML.
        let (default, value) = match (stated, declared.is_empty()) {
            (Some(stated), _) => (stated, None),
            (None, true) => ("none (unset)".to_string(), None),
            (None, false) => (format!("`{}`", declared.join(",")), Some(toml_value(&arg, &declared.join(",")))),
        };
        let placeholder = || {
            let name = arg.get_value_names().and_then(|names| names.first().map(ToString::to_string));
            let name = name.unwrap_or_else(|| "VALUE".to_string());
            toml_value(&arg, name.split(',').next().unwrap_or_default())
        };
        let environment = arg.get_env().map(|name| format!(", environment `{}`", name.to_string_lossy()));
        let flag = arg.get_long().unwrap_or(key);
        let mut about = format!("Flag `--{flag}`{}. Default: {default}", environment.unwrap_or_default());
        text.push('\n');
        text.push_str(&comment(&format!("{}.", meaning.trim_end_matches('.'))));
        match PACKAGE_SETTINGS.iter().find(|(name, _, _)| *name == key) {
            Some((_, package_value, why)) => {
                about.push_str(&format!("; the package sets `{package_value}`: {why}."));
                text.push_str(&comment(&about));
                text.push_str(&format!("{key} = {}\n", toml_value(&arg, package_value)));
            }
            None => {
                about.push('.');
                text.push_str(&comment(&about));
                text.push_str(&format!("#{key} = {}\n", value.unwrap_or_else(placeholder)));
            }
        }
    }
    text
}

/// A setting's line (`key = value`), commented out (`#key = value`) or not; prose lines start
/// with `# `.
fn setting_line(line: &str) -> Option<&str> {
    let line = line.strip_prefix('#').unwrap_or(line);
    let key = line.split_once(" = ")?.0;
    (!key.is_empty() && key.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')).then_some(line)
}

/// The file's settings as the loader reads them, through a file in a temporary directory.
fn load(toml_text: &str) -> Result<Config, clap::Error> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("warren.toml");
    std::fs::write(&path, toml_text).expect("the file is written");
    Config::try_parse_from(["warren".as_ref(), "--config".as_ref(), path.as_os_str()])
}

#[test]
fn the_packaged_config_is_made_from_the_settings_declaration() {
    let expected = packaged_config();
    if std::env::var_os("UPDATE_PACKAGE").is_some() {
        std::fs::write(PACKAGED_CONFIG, &expected).expect("server/debian/warren.toml is writable");
        return;
    }
    let shown = std::fs::read_to_string(PACKAGED_CONFIG).expect("server/debian/warren.toml is readable");
    assert_eq!(
        shown, expected,
        "server/debian/warren.toml is stale: run UPDATE_PACKAGE=1 cargo test -p warren-server --test packaged_config"
    );
}

#[test]
fn every_setting_is_in_the_file_once_under_a_key_the_loader_accepts() {
    let text = packaged_config();
    let uncommented: String = text.lines().filter_map(setting_line).map(|line| format!("{line}\n")).collect();
    let table: toml::Table = uncommented.parse().expect("the file uncommented is TOML");
    let keys: BTreeSet<&str> = table.keys().map(String::as_str).collect();
    let names = settings();
    let declared: BTreeSet<&str> = names.iter().map(|arg| arg.get_id().as_str()).collect();
    assert_eq!(keys, declared, "the file names every setting, and only settings");
    assert_eq!(table.len(), uncommented.lines().count(), "no setting is there twice");
    for line in uncommented.lines() {
        // A placeholder's value may be refused (`max_connections = "N"`), its key never.
        if let Err(error) = load(line) {
            assert!(!error.to_string().contains(UNKNOWN_KEY), "the loader refuses the key of `{line}`: {error}");
        }
    }
}

#[test]
fn the_file_with_its_defaults_uncommented_loads_as_the_defaults_but_the_package_settings() {
    let text = packaged_config();
    let installed = load(&text).expect("the packaged file loads");
    assert_eq!(installed.data_dir, Path::new(PACKAGE_DATA_DIR));
    // Uncommenting every line that shows a default must change nothing: the lines are the defaults.
    let placeholders: BTreeSet<String> = settings()
        .iter()
        .filter(|arg| arg.get_default_values().is_empty() || meaning_and_stated_default(arg).1.is_some())
        .map(|arg| arg.get_id().to_string())
        .collect();
    let defaults_uncommented: String = text
        .lines()
        .filter_map(setting_line)
        .filter(|line| line.split_once(" = ").is_some_and(|(key, _)| !placeholders.contains(key)))
        .map(|line| format!("{line}\n"))
        .collect();
    let loaded = load(&defaults_uncommented).expect("the file with its defaults uncommented loads");
    let defaults = Config::default();
    let package: BTreeSet<&str> = PACKAGE_SETTINGS.iter().map(|(key, _, _)| *key).collect();
    let values = |config: &Config| -> Vec<(String, String)> {
        let shown = config.shown.iter().filter(|setting| !package.contains(setting.key.as_str()));
        shown.map(|setting| (setting.key.clone(), setting.value.clone())).collect()
    };
    assert_eq!(values(&loaded), values(&defaults));
    // `environment` hides the password; compare it itself.
    assert_eq!(loaded.access.default_pass, defaults.access.default_pass);
    assert_eq!(loaded.data_dir, Path::new(PACKAGE_DATA_DIR));
}

/// The value of every `Key=` line of a unit's text.
fn unit_values<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
    unit.lines().filter_map(|line| line.trim().strip_prefix(key)?.strip_prefix('=')).map(str::trim).collect()
}

#[test]
fn the_unit_runs_the_installed_file_and_may_write_to_its_data_directory() {
    let manifest: toml::Table = std::fs::read_to_string(MANIFEST).expect("Cargo.toml").parse().expect("TOML");
    let deb = &manifest["package"]["metadata"]["deb"];
    let conf_files = deb["conf-files"].as_array().expect("conf-files is a list");
    assert!(conf_files.iter().any(|file| file.as_str() == Some(CONFFILE)), "{CONFFILE} is a conffile");
    let assets = deb["assets"].as_array().expect("assets is a list");
    let installs_config = assets.iter().filter_map(|asset| asset.as_array()).any(|asset| {
        asset.first().and_then(toml::Value::as_str) == Some("debian/warren.toml")
            && asset.get(1).and_then(toml::Value::as_str) == CONFFILE.strip_prefix('/')
    });
    assert!(installs_config, "the package installs debian/warren.toml as {CONFFILE}");
    let unit = std::fs::read_to_string(UNIT).expect("server/debian/warren.service is readable");
    let exec_start = unit_values(&unit, "ExecStart");
    assert_eq!(exec_start, [format!("/usr/bin/warren --config {CONFFILE}")]);
    let writable: Vec<&str> = unit_values(&unit, "ReadWritePaths").iter().flat_map(|v| v.split_whitespace()).collect();
    assert!(writable.contains(&PACKAGE_DATA_DIR), "warren.service may write to {PACKAGE_DATA_DIR}: {writable:?}");
}
