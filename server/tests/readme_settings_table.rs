//! README's settings table is made from the settings' one declaration (`warren_server::config::Cli`):
//! each row is a flag's name, TOML key, environment variable, default and help. A setting added
//! without its row fails this test; `UPDATE_README=1 cargo test -p warren-server --test
//! readme_settings_table` rewrites the table.

use clap::{Arg, CommandFactory};
use warren_server::config::{is_file_setting, Cli};

const BEGIN: &str = "<!-- settings table: begin -->";
const END: &str = "<!-- settings table: end -->";
/// The sentence of a setting's help that gives its default when clap's would not do (it is
/// computed when the broker starts, or there is none).
const DEFAULT_SENTENCE: &str = "Default: ";

fn table() -> String {
    let mut text =
        String::from("| flag | TOML key | environment | default | meaning |\n| --- | --- | --- | --- | --- |\n");
    for arg in Cli::command().get_arguments().filter(|arg| arg.get_long().is_some() && !arg.is_hide_set()) {
        let (meaning, default) = meaning_and_default(arg);
        let row = [flag(arg), toml_key(arg), environment(arg), default, meaning];
        text.push_str(&format!("| {} |\n", row.map(|cell| cell.replace('|', "\\|")).join(" | ")));
    }
    text
}

/// A flag that may be given without a value (`--ssl-fail-if-no-peer-cert` is `=true`).
fn is_switch(arg: &Arg) -> bool {
    arg.get_num_args().is_some_and(|range| range.min_values() == 0)
}

fn is_list(arg: &Arg) -> bool {
    arg.get_value_delimiter() == Some(',')
}

fn flag(arg: &Arg) -> String {
    let long = arg.get_long().unwrap_or_default();
    match arg.get_value_names() {
        Some(names) if !is_switch(arg) && arg.get_action().takes_values() => format!("`--{long} {}`", names[0]),
        _ => format!("`--{long}`"),
    }
}

fn toml_key(arg: &Arg) -> String {
    match (is_file_setting(arg), is_list(arg)) {
        (false, _) => String::new(),
        (true, false) => format!("`{}`", arg.get_id()),
        (true, true) => format!("`{}` (array of strings)", arg.get_id()),
    }
}

fn environment(arg: &Arg) -> String {
    let Some(name) = arg.get_env() else { return String::new() };
    let name = name.to_string_lossy();
    if is_list(arg) {
        format!("`{name}` (comma-separated)")
    } else {
        format!("`{name}`")
    }
}

/// The help as one line, and the default: its "Default: ..." sentence, or clap's.
fn meaning_and_default(arg: &Arg) -> (String, String) {
    let help = arg.get_long_help().or(arg.get_help()).map(|help| help.to_string()).unwrap_or_default();
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    if let Some((meaning, default)) = help.split_once(DEFAULT_SENTENCE) {
        let (default, rest) = default.split_once(". ").unwrap_or((default.trim_end_matches('.'), ""));
        let meaning = format!("{} {rest}", meaning.trim_end());
        return (meaning.trim().trim_end_matches('.').to_string(), default.to_string());
    }
    let defaults: Vec<String> = arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
    let default = match defaults.as_slice() {
        [] => "none".to_string(),
        [off] if is_switch(arg) && off == "false" => "off".to_string(),
        values => format!("`{}`", values.join(",")),
    };
    (help.trim_end_matches('.').to_string(), default)
}

#[test]
fn readme_lists_every_setting_as_declared() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
    let readme = std::fs::read_to_string(path).expect("README.md is readable");
    let (before, rest) = readme.split_once(BEGIN).expect("README has the settings table's begin marker");
    let (shown, after) = rest.split_once(END).expect("README has the settings table's end marker");
    let expected = table();
    if std::env::var_os("UPDATE_README").is_some() {
        std::fs::write(path, format!("{before}{BEGIN}\n{expected}{END}{after}")).expect("README.md is writable");
        return;
    }
    assert_eq!(
        shown.trim(),
        expected.trim(),
        "README's settings table is stale: run UPDATE_README=1 cargo test -p warren-server --test readme_settings_table"
    );
}

#[test]
fn every_setting_takes_its_last_value_so_that_a_flag_beats_the_file() {
    for arg in Cli::command().get_arguments().filter(|arg| is_file_setting(arg)) {
        assert!(
            matches!(arg.get_action(), clap::ArgAction::Set),
            "--{} must be ArgAction::Set: the file's settings come before the flags",
            arg.get_long().unwrap_or_default()
        );
    }
}
