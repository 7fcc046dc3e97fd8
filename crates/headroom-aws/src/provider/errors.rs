//! A failed SDK call as a [`CloudError`]: its code classified, `NotFound` kept for one instance.

use aws_sdk_ec2::config::http::HttpResponse;
use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use headroom_cloud::{CloudError, InstanceId};
use headroom_core::{ErrorClass, ProviderKind};

use crate::classify::{ErrorSource, classify};

/// A failed SDK call as a [`CloudError`]. `NotFound` codes become [`CloudError::NotFound`] when
/// the call was about one instance.
pub(crate) fn api_error<E>(err: SdkError<E, HttpResponse>, id: Option<&InstanceId>) -> CloudError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let status = err.raw_response().map(|r| r.status().as_u16());
    let (code, class) = match &err {
        SdkError::TimeoutError(_) => ("Timeout".to_string(), ErrorClass::Transient),
        // Connection trouble is transient; a request that could not be sent for another reason
        // (no credentials, a bad endpoint) will not get better by itself.
        SdkError::DispatchFailure(f) if f.is_io() || f.is_timeout() => {
            ("DispatchFailure".to_string(), ErrorClass::Transient)
        }
        SdkError::DispatchFailure(_) => ("DispatchFailure".to_string(), ErrorClass::InvalidRequest),
        SdkError::ConstructionFailure(_) => (
            "ConstructionFailure".to_string(),
            ErrorClass::InvalidRequest,
        ),
        _ => {
            let code = err.code().unwrap_or_default().to_string();
            let class = classify(&code, ErrorSource::Api { status });
            (code, class)
        }
    };
    if let (ErrorClass::NotFound, Some(id)) = (class, id) {
        return CloudError::NotFound(id.clone());
    }
    let message = err
        .message()
        .map(str::to_string)
        .unwrap_or_else(|| aws_sdk_ec2::error::DisplayErrorContext(&err).to_string());
    CloudError::Refused {
        provider: ProviderKind::Aws,
        class,
        code: if code.is_empty() {
            format!("Http{}", status.unwrap_or(0))
        } else {
            code
        },
        message,
    }
}
