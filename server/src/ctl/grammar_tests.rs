//! The grammar of `warren ctl`: the global options (`-p`, `--url`, `--user`, `--password`,
//! `--config`, `--format`/`--formatter`, `-q`, `-s`) are taken before the verb, as warren ctl always took them, and
//! after it, as rabbitmqctl takes them; verbs' own arguments named like them stay theirs.

use super::{Ctl, Format, Verb};
use clap::{CommandFactory, Parser};

/// `warren ctl ARGS`, parsed.
fn parse(args: &[&str]) -> Result<Ctl, clap::Error> {
    Ctl::try_parse_from(std::iter::once("warren ctl").chain(args.iter().copied()))
}

/// `warren ctl ARGS`, which must parse.
fn parsed(args: &[&str]) -> Ctl {
    match parse(args) {
        Ok(ctl) => ctl,
        Err(error) => panic!("warren ctl {args:?} does not parse: {error}"),
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn permissions(user: &str, [configure, write, read]: [&str; 3]) -> Verb {
    let user = user.to_string();
    Verb::SetPermissions { user, configure: configure.into(), write: write.into(), read: read.into() }
}

#[test]
fn the_grammar_is_consistent() {
    // Clap's own checks: among them, no verb has an argument whose id a global one has.
    Ctl::command().debug_assert();
}

#[test]
fn the_vhost_comes_before_or_after_the_verb() {
    let everything = [".*", ".*", ".*"];
    for args in [
        &["-p", "prod", "set_permissions", "bob", ".*", ".*", ".*"][..],
        &["set_permissions", "-p", "prod", "bob", ".*", ".*", ".*"],
        &["set_permissions", "bob", "--vhost", "prod", ".*", ".*", ".*"],
        &["set_permissions", "bob", ".*", "-p", "prod", ".*", ".*"],
        &["set_permissions", "bob", ".*", ".*", ".*", "-p", "prod"],
        &["set_permissions", "--vhost=prod", "bob", ".*", ".*", ".*"],
    ] {
        let ctl = parsed(args);
        assert_eq!(ctl.vhost.as_deref(), Some("prod"), "{args:?}");
        assert_eq!(ctl.verb, permissions("bob", everything), "{args:?}");
    }
}

#[test]
fn list_columns_do_not_swallow_the_vhost() {
    let columns = strings(&["name", "messages"]);
    for args in [
        &["-p", "prod", "list_queues", "name", "messages"][..],
        &["list_queues", "-p", "prod", "name", "messages"],
        &["list_queues", "name", "-p", "prod", "messages"],
        &["list_queues", "name", "messages", "-p", "prod"],
    ] {
        let ctl = parsed(args);
        assert_eq!(ctl.vhost.as_deref(), Some("prod"), "{args:?}");
        assert_eq!(ctl.verb, Verb::ListQueues { columns: columns.clone() }, "{args:?}");
    }
    let ctl = parsed(&["list_permissions", "-p", "prod"]);
    assert_eq!((ctl.vhost.as_deref(), ctl.verb), (Some("prod"), Verb::ListPermissions { columns: vec![] }));
}

#[test]
fn every_global_option_may_follow_the_verb() {
    let ctl = parsed(&[
        "list_vhosts",
        "--node",
        "http://other:15672",
        "--user",
        "admin",
        "--password",
        "s3cret",
        "--config",
        "ctl.toml",
        "--format",
        "json",
        "name",
    ]);
    assert_eq!(ctl.url.as_deref(), Some("http://other:15672"));
    assert_eq!((ctl.user.as_deref(), ctl.password.as_deref()), (Some("admin"), Some("s3cret")));
    assert_eq!(ctl.config, Some(std::path::PathBuf::from("ctl.toml")));
    assert_eq!(ctl.format, Format::Json);
    assert_eq!(ctl.verb, Verb::ListVhosts { columns: strings(&["name"]) });
    assert_eq!(parsed(&["--format", "json", "status"]).format, Format::Json);
    assert_eq!(parsed(&["status"]).format, Format::Table, "the default");
}

#[test]
fn verb_arguments_named_like_global_options_stay_the_verbs() {
    let ctl = parsed(&["add_user", "--user", "admin", "bob", "secret", "--password", "adminpass"]);
    assert_eq!((ctl.user.as_deref(), ctl.password.as_deref()), (Some("admin"), Some("adminpass")));
    assert_eq!(ctl.verb, Verb::AddUser { user: "bob".into(), password: "secret".into() });
    let ctl = parsed(&["add_vhost", "-p", "/", "prod", "--description", "production"]);
    assert_eq!(ctl.vhost.as_deref(), Some("/"));
    assert_eq!(ctl.verb, Verb::AddVhost { vhost: "prod".into(), description: "production".into() });
}

#[test]
fn permission_patterns_may_begin_with_a_hyphen() {
    let ctl = parsed(&["set_permissions", "-p", "prod", "bob", "-dev$", "^$", "-foo"]);
    assert_eq!(ctl.vhost.as_deref(), Some("prod"));
    assert_eq!(ctl.verb, permissions("bob", ["-dev$", "^$", "-foo"]));
    let ctl = parsed(&["set_permissions", "bob", "--", "-p", ".*", ".*"]);
    assert_eq!((ctl.vhost, ctl.verb), (None, permissions("bob", ["-p", ".*", ".*"])), "after --, a pattern");
}

#[test]
fn a_missing_vhost_value_or_a_stray_argument_is_an_error() {
    assert!(parse(&["set_permissions", "bob", ".*", ".*", ".*", "-p"]).is_err());
    assert!(parse(&["set_permissions", "-p", "prod", "bob", ".*", ".*", ".*", "extra"]).is_err());
    assert!(parse(&["list_queues", "--colour", "red"]).is_err());
}

#[test]
fn rabbitmqctls_output_flags_are_taken_anywhere_on_the_line() {
    let ctl = parsed(&["list_queues", "-p", "prod", "name", "--formatter", "json"]);
    assert_eq!((ctl.vhost.as_deref(), ctl.format), (Some("prod"), Format::Json));
    assert_eq!(ctl.verb, Verb::ListQueues { columns: strings(&["name"]) });
    assert_eq!(parsed(&["--formatter", "pretty_table", "list_vhosts"]).format, Format::Table);
    let ctl = parsed(&["-q", "list_queues", "name", "--silent"]);
    assert!(ctl.quiet && ctl.silent);
    assert!(parsed(&["list_queues", "-s"]).silent);
    assert_eq!(Format::Table.silenced(), Format::Rows, "--silent drops the header row");
    assert_eq!(Format::Json.silenced(), Format::Json);
    assert!(parse(&["--formatter", "rows", "status"]).is_err(), "the header-less table is --silent's, not a value");
}

#[test]
fn set_policy_takes_rabbitmqctls_options_anywhere() {
    let expected = Verb::SetPolicy(super::policies::PolicyArgs {
        name: "ttl".into(),
        pattern: "^orders\\.".into(),
        definition: r#"{"message-ttl": 60000}"#.into(),
        priority: -1,
        apply_to: "queues".into(),
    });
    let definition = r#"{"message-ttl": 60000}"#;
    for args in [
        &["-p", "prod", "set_policy", "--priority", "-1", "--apply-to", "queues", "ttl", "^orders\\.", definition][..],
        &["set_policy", "ttl", "^orders\\.", definition, "--apply-to", "queues", "-p", "prod", "--priority=-1"],
    ] {
        let ctl = parsed(args);
        assert_eq!(ctl.vhost.as_deref(), Some("prod"), "{args:?}");
        assert_eq!(ctl.verb, expected, "{args:?}");
    }
}

#[test]
fn a_node_stands_for_its_api_as_rabbitmqctls_n() {
    assert_eq!(parsed(&["list_queues", "-n", "warren@b"]).url.as_deref(), Some("warren@b"));
    assert_eq!(super::client::api_url("warren@b"), "http://b:15672");
    assert_eq!(super::client::api_url("b:15673"), "http://b:15673");
    assert_eq!(super::client::api_url("localhost"), "http://localhost:15672");
    assert_eq!(super::client::api_url("https://b:15671"), "https://b:15671");
}
