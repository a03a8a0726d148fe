//! The Gateway API kinds the gateway reads, written for kube 5 (the
//! `gateway-api` crate is built for kube 4). Only the fields apiway uses are
//! typed; a field it does not know is ignored when read and never written
//! back, since status goes out as a patch of `status` alone.
//!
//! Versions: `GatewayClass`, `Gateway` and `TLSRoute` are
//! `gateway.networking.k8s.io/v1` (TLSRoute is in the Standard channel as v1
//! since Gateway API v1.5); `ReferenceGrant` is `v1beta1`.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, ObjectMeta};
use kube::core::{ClusterResourceScope, NamespaceResourceScope};
use serde::{Deserialize, Serialize};

/// The API group of every kind here.
pub const GROUP: &str = "gateway.networking.k8s.io";

macro_rules! resource {
    ($ty:ident, $kind:literal, $version:literal, $plural:literal, $scope:ty) => {
        impl kube::Resource for $ty {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($kind)
            }

            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(GROUP)
            }

            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($version)
            }

            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($plural)
            }

            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// `GatewayClass`: which controller serves the Gateways of a class.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct GatewayClass {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: GatewayClassSpec,
    /// Status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ConditionsStatus>,
}
resource!(
    GatewayClass,
    "GatewayClass",
    "v1",
    "gatewayclasses",
    ClusterResourceScope
);

/// `GatewayClass.spec`
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayClassSpec {
    /// `apiway.dev/gateway` for apiway's.
    pub controller_name: String,
}

/// A status that is a list of conditions (GatewayClass).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct ConditionsStatus {
    /// Conditions.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// `Gateway`: the listeners one gateway deployment serves.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct Gateway {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: GatewaySpec,
    /// Status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<GatewayStatus>,
}
resource!(Gateway, "Gateway", "v1", "gateways", NamespaceResourceScope);

/// `Gateway.spec`
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewaySpec {
    /// The GatewayClass.
    pub gateway_class_name: String,
    /// Listeners.
    #[serde(default)]
    pub listeners: Vec<Listener>,
}

/// `Gateway.spec.listeners[]`
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Listener {
    /// Unique within the Gateway.
    pub name: String,
    /// Host names this listener serves; all when unset.
    #[serde(default)]
    pub hostname: Option<String>,
    /// Port.
    pub port: i32,
    /// `TLS` is what apiway serves.
    pub protocol: String,
    /// TLS settings: apiway serves `mode: Passthrough`.
    #[serde(default)]
    pub tls: Option<ListenerTls>,
    /// Which routes may attach.
    #[serde(default)]
    pub allowed_routes: Option<AllowedRoutes>,
}

/// `listeners[].tls`
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct ListenerTls {
    /// `Terminate` (the API's default) or `Passthrough`.
    #[serde(default)]
    pub mode: Option<String>,
}

/// `listeners[].allowedRoutes`
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct AllowedRoutes {
    /// Namespaces routes may come from.
    #[serde(default)]
    pub namespaces: Option<RouteNamespaces>,
    /// Route kinds.
    #[serde(default)]
    pub kinds: Option<Vec<RouteGroupKind>>,
}

/// `allowedRoutes.namespaces`
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct RouteNamespaces {
    /// `Same` (default), `All` or `Selector`.
    #[serde(default)]
    pub from: Option<String>,
    /// For `Selector`: labels of the namespaces.
    #[serde(default)]
    pub selector: Option<LabelSelector>,
}

/// A route kind.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct RouteGroupKind {
    /// API group; the Gateway API's when unset.
    #[serde(default)]
    pub group: Option<String>,
    /// Kind.
    pub kind: String,
}

/// `Gateway.status`
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GatewayStatus {
    /// `Accepted`, `Programmed`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// One per listener.
    #[serde(default)]
    pub listeners: Vec<ListenerStatus>,
}

/// `Gateway.status.listeners[]`
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ListenerStatus {
    /// The listener's name.
    pub name: String,
    /// Route kinds the listener takes.
    pub supported_kinds: Vec<RouteGroupKind>,
    /// Routes attached.
    pub attached_routes: i32,
    /// `Accepted`, `Programmed`, `ResolvedRefs`, `Conflicted`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// `TLSRoute`: SNI host names to backends, TLS passed through.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct TlsRoute {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: TlsRouteSpec,
    /// Status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<RouteStatus>,
}
resource!(
    TlsRoute,
    "TLSRoute",
    "v1",
    "tlsroutes",
    NamespaceResourceScope
);

/// `TLSRoute.spec`
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TlsRouteSpec {
    /// The Gateways (and listeners) it attaches to.
    #[serde(default)]
    pub parent_refs: Vec<ParentReference>,
    /// SNI host names.
    #[serde(default)]
    pub hostnames: Vec<String>,
    /// Rules: their backends.
    #[serde(default)]
    pub rules: Vec<TlsRouteRule>,
}

/// `parentRefs[]`
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ParentReference {
    /// Group; the Gateway API's when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind; `Gateway` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Namespace; the route's when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
    /// A listener name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
    /// A listener port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

/// `rules[]`
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TlsRouteRule {
    /// Backends.
    #[serde(default)]
    pub backend_refs: Vec<BackendRef>,
}

/// `backendRefs[]`
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendRef {
    /// Group; core (`""`) when unset.
    #[serde(default)]
    pub group: Option<String>,
    /// Kind; `Service` when unset.
    #[serde(default)]
    pub kind: Option<String>,
    /// Name.
    pub name: String,
    /// Namespace; the route's when unset.
    #[serde(default)]
    pub namespace: Option<String>,
    /// The Service port.
    #[serde(default)]
    pub port: Option<i32>,
    /// Share of connections (default 1).
    #[serde(default)]
    pub weight: Option<i32>,
}

/// A route's status: one entry per parent per controller.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct RouteStatus {
    /// Parents.
    #[serde(default)]
    pub parents: Vec<RouteParentStatus>,
}

/// `status.parents[]`
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouteParentStatus {
    /// The parentRef this is about.
    pub parent_ref: ParentReference,
    /// The controller that wrote it.
    pub controller_name: String,
    /// `Accepted`, `ResolvedRefs`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// `ReferenceGrant` (v1beta1): lets objects of other namespaces refer to
/// objects in its own.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct ReferenceGrant {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: ReferenceGrantSpec,
}
resource!(
    ReferenceGrant,
    "ReferenceGrant",
    "v1beta1",
    "referencegrants",
    NamespaceResourceScope
);

/// `ReferenceGrant.spec`
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct ReferenceGrantSpec {
    /// Who may refer.
    #[serde(default)]
    pub from: Vec<GrantFrom>,
    /// To what.
    #[serde(default)]
    pub to: Vec<GrantTo>,
}

/// `spec.from[]`
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct GrantFrom {
    /// Group.
    #[serde(default)]
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
}

/// `spec.to[]`
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct GrantTo {
    /// Group (`""` for core).
    #[serde(default)]
    pub group: String,
    /// Kind.
    pub kind: String,
    /// One object, or every one of the kind when unset.
    #[serde(default)]
    pub name: Option<String>,
}
