//! The management API's routes, each declared with the [`Rule`] that guards it: the one place a
//! route is added. The table builds the axum router, wrapping every handler in the
//! authorization layer with its rule, so that a route cannot exist without one; and it lists
//! the routes with their rules for the README's table and the test that walks them all.

use crate::api::Management;
use crate::authorization::{self, Gate, Rule};
use axum::handler::Handler;
use axum::routing::{on, MethodFilter, MethodRouter};
use axum::Router;
use std::collections::BTreeMap;

/// The HTTP methods the API serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verb {
    /// `GET`.
    Get,
    /// `PUT`.
    Put,
    /// `POST`.
    Post,
    /// `DELETE`.
    Delete,
}

impl Verb {
    /// The method's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "GET",
            Verb::Put => "PUT",
            Verb::Post => "POST",
            Verb::Delete => "DELETE",
        }
    }

    fn filter(self) -> MethodFilter {
        match self {
            Verb::Get => MethodFilter::GET,
            Verb::Put => MethodFilter::PUT,
            Verb::Post => MethodFilter::POST,
            Verb::Delete => MethodFilter::DELETE,
        }
    }
}

/// One route and its rule, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteRule {
    /// Its method.
    pub verb: Verb,
    /// The path, with `{vhost}`-style parameters.
    pub path: &'static str,
    /// What it needs of the caller.
    pub rule: Rule,
}

/// Makes a declared route's method router, guarded by its gate.
type Attach = Box<dyn FnOnce(Gate) -> MethodRouter<Management> + Send>;

/// The routes being declared.
#[derive(Default)]
pub struct RouteTable {
    declared: Vec<(RouteRule, Attach)>,
}

impl RouteTable {
    /// Declares `verb path`, served by `handler` once `rule` holds.
    pub fn add<H, T>(&mut self, verb: Verb, path: &'static str, rule: Rule, handler: H) -> &mut Self
    where
        H: Handler<T, Management>,
        T: 'static,
    {
        let attach: Attach = Box::new(move |gate| {
            on(verb.filter(), handler.layer(axum::middleware::from_fn_with_state(gate, authorization::enforce)))
        });
        self.declared.push((RouteRule { verb, path, rule }, attach));
        self
    }

    /// `GET path`.
    pub fn get<H: Handler<T, Management>, T: 'static>(&mut self, path: &'static str, rule: Rule, h: H) -> &mut Self {
        self.add(Verb::Get, path, rule, h)
    }

    /// `PUT path`.
    pub fn put<H: Handler<T, Management>, T: 'static>(&mut self, path: &'static str, rule: Rule, h: H) -> &mut Self {
        self.add(Verb::Put, path, rule, h)
    }

    /// `POST path`.
    pub fn post<H: Handler<T, Management>, T: 'static>(&mut self, path: &'static str, rule: Rule, h: H) -> &mut Self {
        self.add(Verb::Post, path, rule, h)
    }

    /// `DELETE path`.
    pub fn delete<H: Handler<T, Management>, T: 'static>(&mut self, path: &'static str, rule: Rule, h: H) -> &mut Self {
        self.add(Verb::Delete, path, rule, h)
    }

    /// The routes declared, in declaration order.
    pub fn rules(&self) -> Vec<RouteRule> {
        self.declared.iter().map(|(rule, _)| rule.clone()).collect()
    }

    /// The router serving every route declared, for `management`.
    pub fn into_router(self, management: Management) -> Router {
        let mut by_path: BTreeMap<&'static str, MethodRouter<Management>> = BTreeMap::new();
        for (route, attach) in self.declared {
            let guarded = attach(Gate::new(management.clone(), route.rule));
            let merged = match by_path.remove(route.path) {
                Some(existing) => existing.merge(guarded),
                None => guarded,
            };
            by_path.insert(route.path, merged);
        }
        let router = by_path.into_iter().fold(Router::new(), |router, (path, route)| router.route(path, route));
        router.with_state(management)
    }
}
