//! The verbs of users, vhosts, permissions and vhost limits, rabbitmqctl's: `add_user`,
//! `delete_user`, `change_password`, `clear_password`, `set_user_tags`, `add_vhost`, `delete_vhost`,
//! `set_permissions`, `clear_permissions`, `set_topic_permissions`, `clear_topic_permissions`,
//! `set_vhost_limits`, `set_user_limits`, `clear_user_limits`, `set_global_parameter`,
//! `clear_global_parameter` (the lists are in `lists`).

use super::client::{encode, Client};
use super::output::say;
use super::CtlError;
use serde_json::{json, Value};

fn user_path(user: &str) -> String {
    format!("/api/users/{}", encode(user))
}

/// `add_user USER PASSWORD`: a new user, with no tags and no permissions.
pub fn add_user(client: &Client, user: &str, password: &str) -> Result<(), CtlError> {
    if client.get_if_exists(&user_path(user))?.is_some() {
        return Err(CtlError::Failed(format!("user '{user}' already exists (change_password changes its password)")));
    }
    client.send("PUT", &user_path(user), &json!({ "password": password, "tags": "" }))?;
    say(&format!("Adding user \"{user}\" ...\n"));
    Ok(())
}

/// `authenticate_user USER PASSWORD`: whether the credentials log in (exit code 2 if not).
pub fn authenticate_user(client: &Client, user: &str, password: &str) -> Result<(), CtlError> {
    let answer = client.send("POST", &format!("{}/authenticate", user_path(user)), &json!({ "password": password }))?;
    if answer["authenticated"].as_bool() != Some(true) {
        return Err(CtlError::Failed(format!("Error: failed to authenticate user \"{user}\": wrong user or password")));
    }
    say(&format!("Authenticating user \"{user}\" ...\nSuccess\n"));
    Ok(())
}

/// `delete_user USER`.
pub fn delete_user(client: &Client, user: &str) -> Result<(), CtlError> {
    client.delete(&user_path(user), &[])?;
    say(&format!("Deleting user \"{user}\" ...\n"));
    Ok(())
}

fn existing_user(client: &Client, user: &str) -> Result<Value, CtlError> {
    client.get(&user_path(user)).map_err(|e| {
        if e.to_string().contains(" 404") {
            CtlError::Failed(format!("no user '{user}'"))
        } else {
            e
        }
    })
}

/// `change_password USER PASSWORD` (its tags stay).
pub fn change_password(client: &Client, user: &str, password: &str) -> Result<(), CtlError> {
    let current = existing_user(client, user)?;
    client.send("PUT", &user_path(user), &json!({ "password": password, "tags": current["tags"] }))?;
    say(&format!("Changing password for user \"{user}\" ...\n"));
    Ok(())
}

/// `clear_password USER`: the user can then log in only by a client certificate (EXTERNAL).
pub fn clear_password(client: &Client, user: &str) -> Result<(), CtlError> {
    let current = existing_user(client, user)?;
    client.send("PUT", &user_path(user), &json!({ "password_hash": "", "tags": current["tags"] }))?;
    say(&format!("Clearing password for user \"{user}\" ...\n"));
    Ok(())
}

/// `set_user_tags USER TAG...` (none: no tags); its password stays.
pub fn set_user_tags(client: &Client, user: &str, tags: &[String]) -> Result<(), CtlError> {
    existing_user(client, user)?;
    client.send("PUT", &user_path(user), &json!({ "tags": tags }))?;
    say(&format!("Setting tags for user \"{user}\" to [{}] ...\n", tags.join(", ")));
    Ok(())
}

/// `add_vhost VHOST`.
pub fn add_vhost(client: &Client, vhost: &str, description: &str) -> Result<(), CtlError> {
    client.send("PUT", &format!("/api/vhosts/{}", encode(vhost)), &json!({ "description": description }))?;
    say(&format!("Adding vhost \"{vhost}\" ...\n"));
    Ok(())
}

/// `delete_vhost VHOST`: with everything in it.
pub fn delete_vhost(client: &Client, vhost: &str) -> Result<(), CtlError> {
    client.delete(&format!("/api/vhosts/{}", encode(vhost)), &[])?;
    say(&format!("Deleting vhost \"{vhost}\" ...\n"));
    Ok(())
}

fn permission_path(vhost: &str, user: &str) -> String {
    format!("/api/permissions/{}/{}", encode(vhost), encode(user))
}

/// `set_permissions [-p VHOST] USER CONF WRITE READ`.
pub fn set_permissions(client: &Client, vhost: &str, user: &str, patterns: [&str; 3]) -> Result<(), CtlError> {
    let [configure, write, read] = patterns;
    let body = json!({ "configure": configure, "write": write, "read": read });
    client.send("PUT", &permission_path(vhost, user), &body)?;
    say(&format!("Setting permissions for user \"{user}\" in vhost \"{vhost}\" ...\n"));
    Ok(())
}

/// `clear_permissions [-p VHOST] USER`.
pub fn clear_permissions(client: &Client, vhost: &str, user: &str) -> Result<(), CtlError> {
    client.delete(&permission_path(vhost, user), &[])?;
    say(&format!("Clearing permissions for user \"{user}\" in vhost \"{vhost}\" ...\n"));
    Ok(())
}

/// `set_topic_permissions [-p VHOST] USER EXCHANGE WRITE READ`.
pub fn set_topic_permissions(client: &Client, vhost: &str, user: &str, given: [&str; 3]) -> Result<(), CtlError> {
    let [exchange, write, read] = given;
    let path = format!("/api/topic-permissions/{}/{}", encode(vhost), encode(user));
    client.send("PUT", &path, &json!({ "exchange": exchange, "write": write, "read": read }))?;
    say(&format!("Setting topic permissions on \"{exchange}\" for user \"{user}\" in vhost \"{vhost}\" ...\n"));
    Ok(())
}

/// `clear_topic_permissions [-p VHOST] USER [EXCHANGE]`.
pub fn clear_topic_permissions(
    client: &Client,
    vhost: &str,
    user: &str,
    exchange: Option<&str>,
) -> Result<(), CtlError> {
    let mut path = format!("/api/topic-permissions/{}/{}", encode(vhost), encode(user));
    if let Some(exchange) = exchange {
        path = format!("{path}/{}", encode(exchange));
    }
    client.delete(&path, &[])?;
    say(&format!("Clearing topic permissions for user \"{user}\" in vhost \"{vhost}\" ...\n"));
    Ok(())
}

/// `set_user_limits USER JSON`: the limits of JSON are merged into the user's, as rabbitmqctl
/// does.
pub fn set_user_limits(client: &Client, user: &str, definition: &str) -> Result<(), CtlError> {
    let limits: serde_json::Map<String, Value> = serde_json::from_str(definition).map_err(|e| {
        CtlError::Failed(format!("the limits are a JSON object such as '{{\"max-connections\": 10}}': {e}"))
    })?;
    for (name, value) in &limits {
        let path = format!("/api/user-limits/{}/{}", encode(user), encode(name));
        client.send("PUT", &path, &json!({ "value": value }))?;
    }
    say(&format!("Setting user limits to \"{definition}\" for user \"{user}\" ...\n"));
    Ok(())
}

/// `clear_user_limits USER NAME|all`.
pub fn clear_user_limits(client: &Client, user: &str, limit: &str) -> Result<(), CtlError> {
    let names: Vec<String> = if limit == "all" {
        let current = client.get(&format!("/api/user-limits/{}", encode(user)))?;
        current[0]["value"].as_object().map(|v| v.keys().cloned().collect()).unwrap_or_default()
    } else {
        vec![limit.to_string()]
    };
    for name in names {
        client.delete(&format!("/api/user-limits/{}/{}", encode(user), encode(&name)), &[])?;
    }
    say(&format!("Clearing \"{limit}\" limit for user \"{user}\" ...\n"));
    Ok(())
}

/// `set_global_parameter NAME JSON`.
pub fn set_global_parameter(client: &Client, name: &str, value: &str) -> Result<(), CtlError> {
    let value: Value = serde_json::from_str(value)
        .map_err(|e| CtlError::Failed(format!("the value is JSON (a string is quoted: '\"prod\"'): {e}")))?;
    client.send("PUT", &format!("/api/global-parameters/{}", encode(name)), &json!({ "value": value }))?;
    say(&format!("Setting global runtime parameter \"{name}\" to {value} ...\n"));
    Ok(())
}

/// `clear_global_parameter NAME`.
pub fn clear_global_parameter(client: &Client, name: &str) -> Result<(), CtlError> {
    client.delete(&format!("/api/global-parameters/{}", encode(name)), &[])?;
    say(&format!("Clearing global runtime parameter \"{name}\" ...\n"));
    Ok(())
}

/// `set_vhost_limits [-p VHOST] JSON`: the vhost's limits become those of JSON
/// (`{"max-connections": 10, "max-queues": 100}`; a negative value is no limit), as
/// rabbitmqctl sets them.
pub fn set_vhost_limits(client: &Client, vhost: &str, definition: &str) -> Result<(), CtlError> {
    let limits: serde_json::Map<String, Value> = serde_json::from_str(definition).map_err(|e| {
        CtlError::Failed(format!("the limits are a JSON object such as '{{\"max-connections\": 10}}': {e}"))
    })?;
    let current = client.get(&format!("/api/vhost-limits/{}", encode(vhost)))?;
    let set: Vec<String> = current[0]["value"].as_object().map(|v| v.keys().cloned().collect()).unwrap_or_default();
    for name in set.iter().filter(|name| !limits.contains_key(*name)) {
        client.delete(&format!("/api/vhost-limits/{}/{}", encode(vhost), encode(name)), &[])?;
    }
    for (name, value) in &limits {
        let path = format!("/api/vhost-limits/{}/{}", encode(vhost), encode(name));
        client.send("PUT", &path, &json!({ "value": value }))?;
    }
    say(&format!("Applying limits {definition} to vhost \"{vhost}\" ...\n"));
    Ok(())
}
