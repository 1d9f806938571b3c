use super::*;
use crate::error::ReplyCode;

fn loopback() -> IpAddr {
    "127.0.0.1".parse().unwrap()
}

fn remote() -> IpAddr {
    "192.0.2.7".parse().unwrap()
}

fn put_user(name: &str, password: &str) -> AccessChange {
    AccessChange::PutUser { name: name.into(), password: PasswordChange::new_password(password), tags: None }
}

#[test]
fn a_first_start_has_the_default_user_loopback_only_with_every_permission() {
    let control = AccessControl::open(None, &AccessSettings::default()).unwrap();
    assert!(control.authenticate("guest", "guest", loopback()).is_ok());
    assert_eq!(control.authenticate("guest", "nope", loopback()).err(), Some(AuthError::BadCredentials));
    assert_eq!(control.authenticate("nobody", "guest", loopback()).err(), Some(AuthError::BadCredentials));
    assert_eq!(control.authenticate("guest", "guest", remote()).err(), Some(AuthError::LoopbackOnly("guest".into())));
    assert!(control.check("guest", "/", Access::Configure, Resource::Queue("q")).is_ok());
    assert!(control.user("guest").unwrap().is_administrator());
}

#[test]
fn other_defaults_and_no_loopback_restriction() {
    let settings = AccessSettings {
        default_user: "admin".into(),
        default_pass: "s3cret".into(),
        default_vhost: "prod".into(),
        loopback_users: Vec::new(),
    };
    let control = AccessControl::open(None, &settings).unwrap();
    assert!(control.authenticate("admin", "s3cret", remote()).is_ok());
    assert!(control.user("guest").is_none());
    assert!(control.vhost("prod").is_some() && control.vhost("/").is_none());
}

#[test]
fn changes_survive_a_reopen_and_a_deleted_user_loses_its_permissions() {
    let dir = tempfile::tempdir().unwrap();
    let file = || Some(SnapshotFile::new(dir.path().join("access.json")));
    let control = AccessControl::open(file(), &AccessSettings::default()).unwrap();
    control.apply(&put_user("bob", "pw")).unwrap();
    control.apply(&AccessChange::PutVhost { name: "v".into(), description: String::new() }).unwrap();
    let only_b = PermissionSpec { configure: "^b".into(), write: "".into(), read: ".*".into() };
    control
        .apply(&AccessChange::SetPermissions { vhost: "v".into(), user: "bob".into(), permissions: only_b })
        .unwrap();
    let limits = VhostLimits { max_connections: Some(3), max_queues: None };
    control.apply(&AccessChange::SetVhostLimits { vhost: "v".into(), limits }).unwrap();

    let reopened = AccessControl::open(file(), &AccessSettings::default()).unwrap();
    assert!(reopened.authenticate("bob", "pw", remote()).is_ok());
    assert!(reopened.check("bob", "v", Access::Configure, Resource::Queue("bq")).is_ok());
    assert!(reopened.check("bob", "v", Access::Configure, Resource::Queue("q")).is_err());
    assert!(reopened.check("bob", "/", Access::Read, Resource::Queue("q")).is_err(), "no permissions in /");
    assert_eq!(reopened.vhost("v").unwrap().limits, limits);

    reopened.apply(&AccessChange::DeleteUser { name: "bob".into() }).unwrap();
    assert!(reopened.permissions_of("v", "bob").is_none());
    assert!(reopened.validate(&AccessChange::DeleteUser { name: "bob".into() }).is_err());
}

#[test]
fn invalid_changes_are_refused_before_they_are_made() {
    let control = AccessControl::open(None, &AccessSettings::default()).unwrap();
    let bad_pattern = PermissionSpec { configure: "(".into(), write: ".*".into(), read: ".*".into() };
    let change = AccessChange::SetPermissions { vhost: "/".into(), user: "guest".into(), permissions: bad_pattern };
    assert!(control.validate(&change).is_err());
    let unknown_vhost = AccessChange::SetPermissions {
        vhost: "nope".into(),
        user: "guest".into(),
        permissions: PermissionSpec::everything(),
    };
    assert_eq!(control.validate(&unknown_vhost).unwrap_err().code, ReplyCode::NotFound);
    let bad_hash = AccessChange::PutUser {
        name: "x".into(),
        password: PasswordChange::Hash {
            hashing_algorithm: "rabbit_password_hashing_sha256".into(),
            password_hash: "abc".into(),
        },
        tags: None,
    };
    assert!(control.validate(&bad_hash).is_err());
    assert!(control.validate(&put_user("", "pw")).is_err());
}

fn set_policy(kind: PolicyKind, name: &str) -> AccessChange {
    let spec = PolicySpec {
        pattern: "^q".into(),
        definition: r#"{"max-length": 10}"#.into(),
        priority: 0,
        apply_to: "queues".into(),
    };
    AccessChange::SetPolicy { vhost: "/".into(), kind, name: name.into(), spec }
}

#[test]
fn a_vhost_holds_a_bounded_number_of_policies_of_each_kind_and_a_full_one_can_still_replace() {
    use access_state::MAX_POLICIES_PER_VHOST;
    let control = AccessControl::open(None, &AccessSettings::default()).unwrap();
    for n in 0..MAX_POLICIES_PER_VHOST {
        control.apply(&set_policy(PolicyKind::User, &format!("p{n}"))).unwrap();
    }
    let refused = control.validate(&set_policy(PolicyKind::User, "one-more")).unwrap_err();
    assert_eq!(refused.code, ReplyCode::PreconditionFailed);
    assert!(refused.to_string().contains("clear one first"), "{refused}");
    control.validate(&set_policy(PolicyKind::User, "p0")).expect("replacing one is allowed");
    control.validate(&set_policy(PolicyKind::Operator, "cap")).expect("the other kind counts apart");
    control.apply(&AccessChange::ClearPolicy { vhost: "/".into(), kind: PolicyKind::User, name: "p0".into() }).unwrap();
    control.validate(&set_policy(PolicyKind::User, "one-more")).expect("room again once one is cleared");
}

#[test]
fn a_vhost_holds_a_bounded_number_of_topic_permissions() {
    use access_state::MAX_TOPIC_PERMISSIONS_PER_VHOST;
    let control = AccessControl::open(None, &AccessSettings::default()).unwrap();
    let grant = |exchange: &str| AccessChange::SetTopicPermissions {
        vhost: "/".into(),
        user: "guest".into(),
        permissions: TopicPermissionSpec { exchange: exchange.into(), write: ".*".into(), read: ".*".into() },
    };
    for n in 0..MAX_TOPIC_PERMISSIONS_PER_VHOST {
        control.apply(&grant(&format!("x{n}"))).unwrap();
    }
    let refused = control.validate(&grant("one-more")).unwrap_err();
    assert!(refused.to_string().contains("at most 4096 topic permissions"), "{refused}");
    control.validate(&grant("x0")).expect("replacing one is allowed");
}
