//! README's route table is the router's: every route of the management API, in the order the
//! router declares them, with the rule the authorization layer applies to it. A route added
//! without its row here fails this test; `UPDATE_README=1 cargo test -p warren-webui --test
//! readme_route_table` rewrites the table.

use warren_webui::route_table::RouteRule;

const BEGIN: &str = "<!-- route table: begin -->";
const END: &str = "<!-- route table: end -->";

fn table(routes: &[RouteRule]) -> String {
    let mut text = String::from("| method | route | who may |\n| --- | --- | --- |\n");
    for route in routes {
        text.push_str(&format!("| {} | `{}` | {} |\n", route.verb.as_str(), route.path, route.rule.describe()));
    }
    text
}

#[test]
fn readme_lists_every_route_with_its_rule() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
    let readme = std::fs::read_to_string(path).expect("README.md is readable");
    let (before, rest) = readme.split_once(BEGIN).expect("README has the route table's begin marker");
    let (shown, after) = rest.split_once(END).expect("README has the route table's end marker");
    let expected = table(&warren_webui::route_rules());
    if std::env::var_os("UPDATE_README").is_some() {
        std::fs::write(path, format!("{before}{BEGIN}\n{expected}{END}{after}")).expect("README.md is writable");
        return;
    }
    assert_eq!(
        shown.trim(),
        expected.trim(),
        "README's route table is stale: run UPDATE_README=1 cargo test -p warren-webui --test readme_route_table"
    );
}

#[test]
fn no_route_is_declared_twice() {
    let routes = warren_webui::route_rules();
    for (i, route) in routes.iter().enumerate() {
        let again = routes[i + 1..].iter().any(|other| other.verb == route.verb && other.path == route.path);
        assert!(!again, "{} {} is declared twice", route.verb.as_str(), route.path);
    }
}
