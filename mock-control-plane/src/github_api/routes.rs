//! The mock GitHub API's request handling: routing, the App JWT check, and
//! the JSON GitHub answers with (the fields real clients read, shaped like
//! GitHub's).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::time::SystemTime;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use jsonwebtoken::{Algorithm, Validation};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiState, Issued, Route, Shared, lock};

/// Longest App JWT lifetime GitHub accepts (plus a little clock slack).
const MAX_JWT_AHEAD_SECS: u64 = 10 * 60 + 5;

#[derive(Deserialize)]
struct Claims {
    iat: u64,
    exp: u64,
    iss: Value,
}

type Answer = Response<Full<Bytes>>;

pub(crate) async fn handle(state: Shared, req: Request<Incoming>) -> Result<Answer, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let auth = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    // Only the access-token request's body matters (GitHub's optional
    // `repositories` and `permissions`).
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let mut st = lock(&state);
    st.requests.push(format!("{method} {path}"));
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let answer = match (&method, segments.as_slice()) {
        (&Method::GET, ["app", "installations"]) => {
            guarded(&mut st, Route::Installations, auth.as_deref(), |st| {
                list_installations(st, &query)
            })
        }
        (&Method::POST, ["app", "installations", id, "access_tokens"]) => {
            let id = id.parse::<i64>().ok();
            guarded(&mut st, Route::Mint, auth.as_deref(), |st| match id {
                Some(id) => mint(st, id, &body),
                None => error(StatusCode::NOT_FOUND, "Not Found"),
            })
        }
        (&Method::GET, ["installation", "repositories"]) => {
            match st.take_fault(Route::Repositories) {
                Some(status) => fault(status),
                None => repositories(&st, auth.as_deref(), &query),
            }
        }
        (&Method::GET, ["repos", owner, repo]) => repository(&st, auth.as_deref(), owner, repo),
        _ => error(StatusCode::NOT_FOUND, "Not Found"),
    };
    Ok(answer)
}

/// An `/app/...` route: an armed fault answers first, then the JWT must
/// pass, then `serve` answers.
fn guarded(
    st: &mut ApiState,
    route: Route,
    auth: Option<&str>,
    serve: impl FnOnce(&mut ApiState) -> Answer,
) -> Answer {
    if let Some(status) = st.take_fault(route) {
        return fault(status);
    }
    if let Err(why) = check_jwt(st, auth) {
        st.jwt_rejections += 1;
        return error(StatusCode::UNAUTHORIZED, &why);
    }
    serve(st)
}

fn bearer(auth: Option<&str>) -> Option<&str> {
    let auth = auth?;
    auth.strip_prefix("Bearer ")
        .or_else(|| auth.strip_prefix("bearer "))
        .or_else(|| auth.strip_prefix("token "))
        .map(str::trim)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// GitHub's checks of an App JWT.
fn check_jwt(st: &ApiState, auth: Option<&str>) -> Result<(), String> {
    let jwt = bearer(auth).ok_or("A JSON web token could not be decoded")?;
    let mut validation = Validation::new(Algorithm::RS256);
    // `iss` is checked below: GitHub takes it as a number or a string,
    // jsonwebtoken's own check only as a string.
    validation.set_required_spec_claims(&["exp", "iat"]);
    validation.leeway = 0;
    let data = jsonwebtoken::decode::<Claims>(jwt, &st.key, &validation)
        .map_err(|e| format!("A JSON web token could not be decoded ({e})"))?;
    let claims = data.claims;
    let iss_ok = match &claims.iss {
        Value::Number(n) => n.as_u64() == Some(st.app_id),
        Value::String(s) => s.parse::<u64>().ok() == Some(st.app_id),
        _ => false,
    };
    if !iss_ok {
        return Err("Integration not found ('iss' is not this App)".to_owned());
    }
    let now = unix_now();
    if claims.exp > now + MAX_JWT_AHEAD_SECS {
        return Err("'Expiration time' claim ('exp') is too far in the future".to_owned());
    }
    if claims.iat > now + 5 {
        return Err("'Issued at' claim ('iat') must be a time in the past".to_owned());
    }
    Ok(())
}

/// `(per_page, page)`: GitHub's defaults 30 and 1, per_page at most 100.
fn paging(query: &str) -> (usize, usize) {
    let mut per_page = 30;
    let mut page = 1;
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("per_page", v)) => per_page = v.parse().unwrap_or(30),
            Some(("page", v)) => page = v.parse().unwrap_or(1),
            _ => {}
        }
    }
    (per_page.clamp(1, 100), page.max(1))
}

fn page_of<T: Clone>(items: &[T], query: &str) -> Vec<T> {
    let (per_page, page) = paging(query);
    items
        .iter()
        .skip((page - 1) * per_page)
        .take(per_page)
        .cloned()
        .collect()
}

fn list_installations(st: &mut ApiState, query: &str) -> Answer {
    let all: Vec<Value> = st
        .installations
        .iter()
        .map(|i| {
            json!({
                "id": i.id,
                "account": {
                    "login": i.account,
                    "id": 1000 + i.id,
                    "type": "Organization",
                    "site_admin": false
                },
                "app_id": st.app_id,
                "target_id": 1000 + i.id,
                "target_type": "Organization",
                "repository_selection": "selected",
                "permissions": {"contents": "write", "metadata": "read"},
                "events": [],
                "single_file_name": null
            })
        })
        .collect();
    json_answer(StatusCode::OK, &Value::Array(page_of(&all, query)))
}

/// GitHub's optional access-token request body.
#[derive(Deserialize, Default)]
struct MintBody {
    #[serde(default)]
    repositories: Option<Vec<String>>,
    #[serde(default)]
    permissions: Option<BTreeMap<String, String>>,
}

fn mint(st: &mut ApiState, installation_id: i64, body: &[u8]) -> Answer {
    let Some(installation) = st.installations.iter().find(|i| i.id == installation_id) else {
        return error(StatusCode::NOT_FOUND, "Not Found");
    };
    let body: MintBody = if body.iter().all(u8::is_ascii_whitespace) {
        MintBody::default()
    } else {
        match serde_json::from_slice(body) {
            Ok(b) => b,
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    &format!("Problems parsing JSON: {e}"),
                );
            }
        }
    };
    // Names without owner, as GitHub takes them: each must be one of the
    // installation's.
    let repositories = match body.repositories {
        None => None,
        Some(names) => {
            let mut full = Vec::new();
            for name in names {
                let found = installation.repositories.iter().find(|r| {
                    r.split_once('/')
                        .is_some_and(|(_, n)| n.eq_ignore_ascii_case(&name))
                });
                match found {
                    Some(r) => full.push(r.clone()),
                    None => {
                        return error(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            &format!(
                                "There is at least one repository that does not exist or is not accessible to the parent installation: {name}"
                            ),
                        );
                    }
                }
            }
            Some(full)
        }
    };
    let token = format!("ghs_{}", uuid::Uuid::new_v4().simple());
    let expires_at = SystemTime::now() + st.token_lifetime;
    st.tokens.insert(
        token.clone(),
        Issued {
            installation_id,
            expires_at,
            revoked: false,
            repositories,
            permissions: body.permissions,
        },
    );
    st.mints.push(installation_id);
    json_answer(
        StatusCode::CREATED,
        &json!({
            "token": token,
            "expires_at": humantime::format_rfc3339_seconds(expires_at).to_string(),
            "permissions": {"contents": "write", "metadata": "read"},
            "repository_selection": "selected"
        }),
    )
}

fn repositories(st: &ApiState, auth: Option<&str>, query: &str) -> Answer {
    let live = bearer(auth)
        .and_then(|t| st.tokens.get(t))
        .filter(|issued| issued.live());
    let Some(issued) = live else {
        return error(StatusCode::UNAUTHORIZED, "Bad credentials");
    };
    let names: Vec<String> = st.covered(issued);
    let repos: Vec<Value> = names
        .iter()
        .enumerate()
        .map(|(n, full_name)| {
            let (owner, name) = full_name.split_once('/').unwrap_or(("", full_name));
            json!({
                "id": n + 1,
                "name": name,
                "full_name": full_name,
                "private": true,
                "owner": {"login": owner, "type": "Organization"}
            })
        })
        .collect();
    json_answer(
        StatusCode::OK,
        &json!({
            "total_count": repos.len(),
            "repository_selection": "selected",
            "repositories": page_of(&repos, query)
        }),
    )
}

/// `GET /repos/{owner}/{repo}`: 401 without a live token, 404 when the
/// token does not open the repository (GitHub's answer), else its summary.
fn repository(st: &ApiState, auth: Option<&str>, owner: &str, repo: &str) -> Answer {
    let live = bearer(auth)
        .and_then(|t| st.tokens.get(t))
        .filter(|issued| issued.live());
    let Some(issued) = live else {
        return error(StatusCode::UNAUTHORIZED, "Bad credentials");
    };
    let full = format!("{owner}/{repo}");
    match st
        .covered(issued)
        .into_iter()
        .find(|r| r.eq_ignore_ascii_case(&full))
    {
        Some(name) => json_answer(
            StatusCode::OK,
            &json!({"full_name": name, "name": repo, "private": true, "owner": {"login": owner}}),
        ),
        None => error(StatusCode::NOT_FOUND, "Not Found"),
    }
}

fn fault(status: u16) -> Answer {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    error(
        status,
        status.canonical_reason().unwrap_or("injected fault"),
    )
}

fn error(status: StatusCode, message: &str) -> Answer {
    json_answer(
        status,
        &json!({
            "message": message,
            "documentation_url": "https://docs.github.com/rest",
            "status": status.as_u16().to_string()
        }),
    )
}

fn json_answer(status: StatusCode, body: &Value) -> Answer {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paging_defaults_and_limits() {
        assert_eq!(paging(""), (30, 1));
        assert_eq!(paging("per_page=100&page=3"), (100, 3));
        assert_eq!(paging("per_page=500&page=0"), (100, 1));
        let items: Vec<u32> = (0..250).collect();
        assert_eq!(page_of(&items, "per_page=100&page=3").len(), 50);
        assert!(page_of(&items, "per_page=100&page=4").is_empty());
    }
}
