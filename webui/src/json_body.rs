//! [`JsonBody`]: a request body read as JSON the way RabbitMQ's API reads it. Whatever the
//! `Content-Type` (rabbitmqadmin and curl scripts do not always send one), and a body that is
//! not JSON, or not the JSON the route takes, is refused with RabbitMQ's 400
//! `{"error":"bad_request","reason":...}`, the reason saying what is wrong and where: not
//! axum's 415 or 422 in plain text, which clients written for RabbitMQ do not expect.

use crate::error::ApiError;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

/// A request body of type `T`, read from JSON.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        // Bytes keeps the router's body limit: a body over it is refused before it is read.
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| ApiError::new(rejection.status(), rejection.body_text()))?;
        parse(&bytes).map(JsonBody)
    }
}

/// `bytes` as a `T`, or a 400 that says why not.
fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|error| {
        ApiError::new(StatusCode::BAD_REQUEST, format!("the request body is not what this route takes: {error}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::response::IntoResponse;

    #[derive(Debug, serde::Deserialize)]
    struct Body {
        #[allow(dead_code)]
        durable: bool,
    }

    async fn answer(body: &[u8]) -> (StatusCode, serde_json::Value) {
        let error = parse::<Body>(body).expect_err("refused");
        let response = error.into_response();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16).await.expect("body");
        (status, serde_json::from_slice(&bytes).expect("json"))
    }

    #[tokio::test]
    async fn a_body_that_is_not_json_or_not_the_routes_is_a_400_in_rabbitmqs_shape() {
        for body in [&b"{"[..], br#"{"durable": "maybe"}"#, b"[1]"] {
            let (status, json) = answer(body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST);
            assert_eq!(json["error"], "bad_request");
            assert!(json["reason"].as_str().is_some_and(|r| r.contains("line 1")), "{json}");
        }
        assert!(parse::<Body>(br#"{"durable": true}"#).is_ok());
    }
}
