//! The shipped Grafana dashboard: its queries (panels' targets and annotations), its
//! template variables, and the checks that need no Prometheus: a datasource variable,
//! every panel on it, no instance or job written in, no variable left undefined.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

/// One PromQL query of the dashboard and where it is.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Query {
    /// `panel "<title>" target <refId>`, or `annotation "<name>"`.
    pub(crate) place: String,
    pub(crate) expr: String,
}

/// A template variable: its name, type and query (`label_values(...)` for `query`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Variable {
    pub(crate) name: String,
    pub(crate) kind: String,
    pub(crate) query: String,
}

/// The Grafana variables the dashboard may use that it does not define, and the value a
/// check gives them: Grafana's `$__rate_interval` with its default 15 s scrape interval
/// (4 × 15 s).
pub(crate) const BUILTIN: &[(&str, &str)] = &[("__rate_interval", "1m")];

/// The dashboard JSON.
pub(crate) struct Dashboard {
    json: Value,
}

impl Dashboard {
    pub(crate) fn parse(text: &str) -> Result<Dashboard> {
        let json: Value = serde_json::from_str(text).context("the dashboard is not JSON")?;
        ensure!(json.is_object(), "the dashboard is not a JSON object");
        Ok(Dashboard { json })
    }

    /// Every panel, those inside rows included.
    fn panels(&self) -> Vec<&Value> {
        let mut out = Vec::new();
        let top = self.json["panels"].as_array().into_iter().flatten();
        for p in top {
            out.push(p);
            out.extend(p["panels"].as_array().into_iter().flatten());
        }
        out
    }

    /// Every query: each panel target's `expr`, then each annotation's.
    pub(crate) fn queries(&self) -> Result<Vec<Query>> {
        let mut out = Vec::new();
        for p in self.panels() {
            let title = p["title"].as_str().unwrap_or("(untitled)");
            for t in p["targets"].as_array().into_iter().flatten() {
                let id = t["refId"].as_str().unwrap_or("?");
                let place = format!("panel {title:?} target {id}");
                let expr = t["expr"].as_str().filter(|e| !e.trim().is_empty());
                let expr = expr.with_context(|| format!("{place}: no expr"))?;
                out.push(Query {
                    place,
                    expr: expr.to_owned(),
                });
            }
        }
        for a in self.json["annotations"]["list"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(expr) = a["expr"].as_str() {
                let name = a["name"].as_str().unwrap_or("(unnamed)");
                out.push(Query {
                    place: format!("annotation {name:?}"),
                    expr: expr.to_owned(),
                });
            }
        }
        Ok(out)
    }

    /// The template variables, in order (a variable may use the ones before it).
    pub(crate) fn variables(&self) -> Vec<Variable> {
        self.json["templating"]["list"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| Variable {
                name: v["name"].as_str().unwrap_or("").to_owned(),
                kind: v["type"].as_str().unwrap_or("").to_owned(),
                query: match &v["query"] {
                    Value::String(s) => s.clone(),
                    q => q["query"].as_str().unwrap_or("").to_owned(),
                },
            })
            .collect()
    }

    /// What the dashboard must be to import anywhere: a `datasource` variable of type
    /// datasource for Prometheus that every panel and target uses; panels with queries;
    /// every `$variable` in a query defined (or Grafana's [`BUILTIN`]); instance and job
    /// only ever matched against their variables; no variable with a saved selection.
    pub(crate) fn check(&self) -> Result<()> {
        let vars = self.variables();
        let ds = vars
            .iter()
            .find(|v| v.kind == "datasource")
            .context("no template variable of type datasource")?;
        ensure!(
            ds.query == "prometheus",
            "the datasource variable ${} is for {:?}, not prometheus",
            ds.name,
            ds.query
        );
        let uses_ds = |v: &Value| {
            v["uid"]
                .as_str()
                .is_some_and(|u| u == format!("${{{}}}", ds.name) || u == format!("${}", ds.name))
        };
        for v in self.json["templating"]["list"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let name = v["name"].as_str().unwrap_or("?");
            let current = &v["current"];
            ensure!(
                current.is_null() || current.as_object().is_some_and(|o| o.is_empty()),
                "variable ${name} has a saved selection ({current}): the dashboard would \
                 open on one host's value"
            );
            if v["type"] == "query" {
                ensure!(
                    uses_ds(&v["datasource"]),
                    "variable ${name} is not on ${}",
                    ds.name
                );
            }
        }
        let mut panels_with_queries = 0;
        for p in self.panels() {
            let title = p["title"].as_str().unwrap_or("(untitled)");
            if p["type"] == "row" {
                continue;
            }
            ensure!(
                uses_ds(&p["datasource"]),
                "panel {title:?} is not on ${}",
                ds.name
            );
            let targets = p["targets"].as_array().map_or(&[][..], Vec::as_slice);
            ensure!(!targets.is_empty(), "panel {title:?} has no query");
            for t in targets {
                ensure!(
                    uses_ds(&t["datasource"]),
                    "a target of panel {title:?} is not on ${}",
                    ds.name
                );
            }
            panels_with_queries += 1;
        }
        ensure!(panels_with_queries > 0, "the dashboard has no panel");
        for a in self.json["annotations"]["list"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a.get("expr").is_some())
        {
            let name = a["name"].as_str().unwrap_or("(unnamed)");
            ensure!(
                uses_ds(&a["datasource"]),
                "annotation {name:?} is not on ${}",
                ds.name
            );
        }
        let defined: Vec<&str> = vars.iter().map(|v| v.name.as_str()).collect();
        let mut exprs = self.queries()?;
        for v in &vars {
            if v.kind == "query" {
                exprs.push(Query {
                    place: format!("variable ${}", v.name),
                    expr: v.query.clone(),
                });
            }
        }
        for q in &exprs {
            for name in variables_in(&q.expr) {
                ensure!(
                    defined.contains(&name.as_str()) || BUILTIN.iter().any(|(b, _)| *b == name),
                    "{}: ${name} is not a variable of the dashboard",
                    q.place
                );
            }
            for label in ["instance", "job"] {
                for value in matcher_values(&q.expr, label) {
                    ensure!(
                        value == format!("${label}") || value == format!("${{{label}}}"),
                        "{}: {label} is matched against {value:?}, not ${label}: no host or \
                         job may be written into the dashboard",
                        q.place
                    );
                }
            }
        }
        Ok(())
    }
}

/// The `$name` / `${name}` variables used in `expr`.
pub(crate) fn variables_in(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find('$') {
        rest = &rest[i + 1..];
        let (name, after) = match rest.strip_prefix('{') {
            Some(r) => match r.find('}') {
                Some(j) => (&r[..j], &r[j + 1..]),
                None => (r, ""),
            },
            None => {
                let n = rest
                    .bytes()
                    .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
                    .count();
                (&rest[..n], &rest[n..])
            }
        };
        out.push(name.to_owned());
        rest = after;
    }
    out
}

/// The values `label` is matched against in `expr` (`label="v"`, `=~`, `!=`, `!~`).
fn matcher_values(expr: &str, label: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = expr.as_bytes();
    let mut from = 0;
    while let Some(i) = expr[from..].find(label).map(|i| i + from) {
        from = i + label.len();
        let before_ok = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        let rest = expr[from..].trim_start();
        let op = ["=~", "!~", "!=", "="]
            .into_iter()
            .find(|o| rest.starts_with(o));
        if let (true, Some(op)) = (before_ok, op) {
            let v = rest[op.len()..].trim_start();
            if let Some(v) = v.strip_prefix('"')
                && let Some(end) = v.find('"')
            {
                out.push(v[..end].to_owned());
            }
        }
    }
    out
}

/// `expr` with each variable replaced by its value in `values` (or [`BUILTIN`]'s);
/// a variable without one is an error.
pub(crate) fn substitute(expr: &str, values: &BTreeMap<String, String>) -> Result<String> {
    let mut out = expr.to_owned();
    let mut names = variables_in(expr);
    // Longest first: `$instance` must not be replaced inside `$instance_x`.
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    for name in names {
        let value = values
            .get(&name)
            .map(String::as_str)
            .or_else(|| BUILTIN.iter().find(|(b, _)| *b == name).map(|(_, v)| *v));
        let Some(value) = value else {
            bail!("no value for ${name} in {expr:?}");
        };
        out = out
            .replace(&format!("${{{name}}}"), value)
            .replace(&format!("${name}"), value);
    }
    Ok(out)
}

/// The selector and label of a `label_values(selector, label)` variable query.
pub(crate) fn label_values_query(query: &str) -> Result<(String, String)> {
    let inner = query
        .trim()
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(')'))
        .with_context(|| format!("{query:?} is not label_values(selector, label)"))?;
    let (selector, label) = inner
        .rsplit_once(',')
        .with_context(|| format!("{query:?}: label_values needs a selector and a label"))?;
    Ok((selector.trim().to_owned(), label.trim().to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped() -> Dashboard {
        let path = crate::workspace_root().join(super::super::DASHBOARD);
        Dashboard::parse(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn the_shipped_dashboard_is_on_a_datasource_variable_and_names_no_host() {
        let d = shipped();
        d.check().unwrap();
        let vars: Vec<String> = d.variables().into_iter().map(|v| v.name).collect();
        assert_eq!(vars, ["datasource", "job", "instance"]);
        assert!(d.queries().unwrap().len() >= 20);
    }

    #[test]
    fn the_shipped_dashboard_shows_the_overload_control_and_readiness() {
        let queries = shipped().queries().unwrap();
        for metric in [
            "dra_overload_level",
            "dra_overload_delay_seconds",
            "dra_overload_admit_rate",
            "class_action:dra_overload_shed:rate1m",
            "dra_ready",
        ] {
            assert!(
                queries.iter().any(|q| q.expr.contains(metric)),
                "no panel reads {metric}"
            );
        }
    }

    #[test]
    fn a_host_written_into_a_query_or_a_saved_selection_fails_the_check() {
        let text =
            std::fs::read_to_string(crate::workspace_root().join(super::super::DASHBOARD)).unwrap();
        let host = text.replacen(
            "instance=\\\"$instance\\\"",
            "instance=\\\"10.0.0.1:9100\\\"",
            1,
        );
        assert_ne!(host, text);
        let e = format!(
            "{:#}",
            Dashboard::parse(&host).unwrap().check().unwrap_err()
        );
        assert!(e.contains("10.0.0.1:9100") && e.contains("no host"), "{e}");
        let job = text.replacen("job=\\\"$job\\\"", "job=~\\\"dra.*\\\"", 1);
        let e = format!("{:#}", Dashboard::parse(&job).unwrap().check().unwrap_err());
        assert!(e.contains("dra.*"), "{e}");
        let saved = text.replacen("\"current\": {}", "\"current\": {\"text\": \"dra1\"}", 1);
        let e = format!(
            "{:#}",
            Dashboard::parse(&saved).unwrap().check().unwrap_err()
        );
        assert!(e.contains("saved selection"), "{e}");
        let undefined = text.replacen("$__rate_interval", "$interval", 1);
        let e = format!(
            "{:#}",
            Dashboard::parse(&undefined).unwrap().check().unwrap_err()
        );
        assert!(e.contains("$interval is not a variable"), "{e}");
        let fixed_ds = text.replacen(
            "\"uid\": \"${datasource}\"",
            "\"uid\": \"P1809F7CD0C75ACF3\"",
            1,
        );
        let e = format!(
            "{:#}",
            Dashboard::parse(&fixed_ds).unwrap().check().unwrap_err()
        );
        assert!(e.contains("is not on $datasource"), "{e}");
    }

    #[test]
    fn variables_are_found_substituted_and_label_values_split() {
        let e = r#"sum(rate(x{job="$job",instance="${instance}"}[$__rate_interval]))"#;
        assert_eq!(variables_in(e), ["job", "instance", "__rate_interval"]);
        let values = BTreeMap::from([
            ("job".to_owned(), "dra".to_owned()),
            ("instance".to_owned(), "127.0.0.1:9100".to_owned()),
        ]);
        assert_eq!(
            substitute(e, &values).unwrap(),
            r#"sum(rate(x{job="dra",instance="127.0.0.1:9100"}[1m]))"#
        );
        assert!(substitute("x{a=\"$nope\"}", &values).is_err());
        assert_eq!(
            label_values_query(r#"label_values(up{job="$job"}, instance)"#).unwrap(),
            (r#"up{job="$job"}"#.to_owned(), "instance".to_owned())
        );
        assert_eq!(
            matcher_values(r#"up{job = "a", xjob="b", job!~"c"}"#, "job"),
            ["a", "c"]
        );
    }
}
