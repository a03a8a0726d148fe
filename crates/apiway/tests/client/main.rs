//! apiway-client, alone and under kube-rs, against three `apiway standin`
//! processes on 127.0.0.2, .3 and .4 that advertise each other with
//! `Alt-Svc`: the endpoint in use is killed (resets, refused connects) or
//! SIGSTOPped (a hung server) during a stream of GETs, on the HTTP/2 path
//! and on kube's own HTTP/1.1 stack over the client's dialer, and the
//! requests lost are counted; and a kube-rs watcher on pods, served from
//! one fixture API behind the stand-ins, resumes on another endpoint.

mod endpoints;
mod gets;
mod support;
mod watch;
