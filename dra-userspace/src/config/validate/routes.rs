//! `[[route]]`.

use std::collections::HashMap;

use super::syntax::{application, identity, u32_in};
use super::{Refs, target_label, unique};
use crate::config::error::Errors;
use crate::config::raw::{Item, RawConfig};
use crate::config::{Route, RouteRealm};

/// `[[route]]`.
pub(super) fn routes(e: &mut Errors<'_>, raw: &RawConfig, refs: &Refs<'_>) -> Vec<Route> {
    let mut routes = Vec::new();
    let mut seen_routes = HashMap::new();
    for Item { v: r, span } in &raw.routes {
        let realm = match r.realm.get_ref().as_str() {
            "*" => Some(RouteRealm::Any),
            s if s.contains('*') => {
                e.at(
                    &r.realm.span(),
                    format!(
                        "bad realm \"{s}\": the only wildcard is \"*\" alone (any realm without \
                         an exact route)"
                    ),
                );
                None
            }
            _ => identity(e, "realm", &r.realm).map(RouteRealm::Exact),
        };
        let application = r.application.as_ref().map(|a| application(e, a));
        let target = refs.target(e, "route", span, &r.peer, &r.group);
        let weight = u32_in(e, "weight", &r.weight, 1, 65535, 1);
        let (Some(realm), Some(target)) = (realm, target) else {
            continue;
        };
        let Some(application) = application.map_or(Some(None), |a| a.map(Some)) else {
            continue;
        };
        let realm_key = match &realm {
            RouteRealm::Any => "*".to_string(),
            RouteRealm::Exact(s) => s.to_ascii_lowercase(),
        };
        if unique(
            e,
            &mut seen_routes,
            (realm_key, application, target.clone()),
            span,
            || {
                format!(
                    "duplicate route to {} for this realm and application",
                    target_label(&target)
                )
            },
        ) {
            routes.push(Route {
                realm,
                application,
                target,
                weight,
            });
        }
    }
    routes
}
