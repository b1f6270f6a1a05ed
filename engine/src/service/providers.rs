//! Provider RPCs, delegated to the persisted provider store. Changes write
//! `providers.json` (write, fsync, rename), so they run on the blocking pool.

use code_agent_proto::*;
use tonic::Status;

use super::Service;
use crate::providers::{ProviderError, ProviderStore};

impl Service {
    /// Runs a provider-store change on the blocking pool.
    async fn change_providers<T: Send + 'static>(
        &self,
        change: impl FnOnce(&ProviderStore) -> Result<T, ProviderError> + Send + 'static,
    ) -> Result<T, Status> {
        let store = self.engine.providers.clone();
        let out = tokio::task::spawn_blocking(move || change(&store))
            .await
            .map_err(|e| Status::internal(format!("changing the providers: {e}")))??;
        Ok(out)
    }

    pub(super) async fn list_providers(
        &self,
        _request: ListProvidersRequest,
    ) -> Result<ListProvidersResponse, Status> {
        Ok(self.engine.providers.list())
    }

    pub(super) async fn get_provider(
        &self,
        request: GetProviderRequest,
    ) -> Result<GetProviderResponse, Status> {
        if request.name.is_empty() {
            return Err(Status::invalid_argument("name: required"));
        }
        Ok(GetProviderResponse {
            provider: Some(self.engine.providers.get(&request.name)?),
        })
    }

    pub(super) async fn add_provider(
        &self,
        request: AddProviderRequest,
    ) -> Result<AddProviderResponse, Status> {
        let provider = request
            .provider
            .ok_or_else(|| Status::invalid_argument("provider: required"))?;
        let provider = self.change_providers(|p| p.add(provider)).await?;
        Ok(AddProviderResponse {
            success: true,
            error: String::new(),
            provider: Some(provider),
        })
    }

    pub(super) async fn update_provider(
        &self,
        request: UpdateProviderRequest,
    ) -> Result<UpdateProviderResponse, Status> {
        let provider = request
            .provider
            .ok_or_else(|| Status::invalid_argument("provider: required"))?;
        let provider = self.change_providers(|p| p.update(provider)).await?;
        Ok(UpdateProviderResponse {
            success: true,
            error: String::new(),
            provider: Some(provider),
        })
    }

    pub(super) async fn remove_provider(
        &self,
        request: RemoveProviderRequest,
    ) -> Result<RemoveProviderResponse, Status> {
        if request.name.is_empty() {
            return Err(Status::invalid_argument("name: required"));
        }
        self.change_providers(move |p| p.remove(&request.name))
            .await?;
        Ok(RemoveProviderResponse {
            success: true,
            error: String::new(),
        })
    }

    pub(super) async fn set_default_model(
        &self,
        request: SetDefaultModelRequest,
    ) -> Result<SetDefaultModelResponse, Status> {
        if request.provider.is_empty() {
            return Err(Status::invalid_argument("provider: required"));
        }
        if request.model.is_empty() {
            return Err(Status::invalid_argument("model: required"));
        }
        let (provider, model) = self
            .change_providers(move |p| p.set_default(&request.provider, &request.model))
            .await?;
        Ok(SetDefaultModelResponse {
            success: true,
            error: String::new(),
            provider,
            model,
        })
    }

    pub(super) async fn get_default_model(
        &self,
        _request: GetDefaultModelRequest,
    ) -> Result<GetDefaultModelResponse, Status> {
        Ok(self.engine.providers.get_default())
    }
}
