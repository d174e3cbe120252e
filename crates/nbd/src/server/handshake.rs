//! The handshake: the greeting, then option haggling (one method per option) until the client
//! picks an export, asks for TLS or leaves.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::{discard, proto_err, read_exact_or_closed, ConnEnd, Haggle, Negotiation, Server, Session, METRICS_EXPORT};
use crate::proto::*;

impl Server {
    /// The handshake without TLS, up to the transmission phase. Returns None if the client
    /// left (or asked for TLS, which the caller must then start: see [`Server::options`]).
    pub async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(&self, s: &mut S) -> Result<Option<Session>, ConnEnd> {
        let mut st = self.greeting(s).await?;
        match self.options(s, false, &mut st).await? {
            Haggle::Go(sess) => Ok(Some(sess)),
            Haggle::StartTls | Haggle::Closed => Ok(None),
        }
    }

    /// Send the greeting and read the client's flags.
    pub async fn greeting<S: AsyncRead + AsyncWrite + Unpin>(&self, s: &mut S) -> Result<Negotiation, ConnEnd> {
        let mut hello = Vec::with_capacity(18);
        hello.extend_from_slice(&NBDMAGIC.to_be_bytes());
        hello.extend_from_slice(&IHAVEOPT.to_be_bytes());
        hello.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
        s.write_all(&hello).await?;
        s.flush().await?;
        let mut cf = [0u8; 4];
        read_exact_or_closed(s, &mut cf).await?;
        let cflags = u32::from_be_bytes(cf);
        if cflags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
            return Err(ConnEnd::Protocol(format!("unknown client flags {cflags:#x}")));
        }
        Ok(Negotiation { no_zeroes: cflags & FLAG_C_NO_ZEROES != 0, structured: false, meta: false, options: 0 })
    }

    /// Option haggling, until the client picks an export, asks for TLS or leaves. With TLS
    /// configured, every option but STARTTLS and ABORT is refused until TLS is running.
    pub async fn options<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        s: &mut S,
        tls_active: bool,
        st: &mut Negotiation,
    ) -> Result<Haggle, ConnEnd> {
        let mut frozen: Option<Arc<Vec<u8>>> = None;
        let tls_required = self.tls && !tls_active;
        while st.options < 1024 {
            st.options += 1;
            let mut h = [0u8; 16];
            read_exact_or_closed(s, &mut h).await?;
            let oh = parse_option_header(&h).map_err(proto_err)?;
            if oh.len > MAX_OPTION_BYTES {
                discard(s, oh.len as u64).await?;
                self.reply(
                    s,
                    oh.option,
                    REP_ERR_TOO_BIG,
                    format!("option data of {} bytes; at most {MAX_OPTION_BYTES}", oh.len).as_bytes(),
                )
                .await?;
                continue;
            }
            let mut data = vec![0u8; oh.len as usize];
            read_exact_or_closed(s, &mut data).await?;
            if self.shutdown.load(Ordering::Relaxed) && oh.option != OPT_ABORT {
                if oh.option == OPT_EXPORT_NAME {
                    return Ok(Haggle::Closed);
                }
                self.reply(s, oh.option, REP_ERR_SHUTDOWN, b"the server is shutting down").await?;
                continue;
            }
            if tls_required && !matches!(oh.option, OPT_STARTTLS | OPT_ABORT) {
                if oh.option == OPT_EXPORT_NAME {
                    return Err(ConnEnd::Protocol("NBD_OPT_EXPORT_NAME without TLS on a TLS-only server".into()));
                }
                self.reply(s, oh.option, REP_ERR_TLS_REQD, b"this server requires TLS: send NBD_OPT_STARTTLS first").await?;
                continue;
            }
            let ended = match oh.option {
                OPT_EXPORT_NAME => Some(self.opt_export_name(s, data, st, &mut frozen, tls_active).await?),
                OPT_ABORT => {
                    let _ = self.reply(s, oh.option, REP_ACK, &[]).await;
                    Some(Haggle::Closed)
                }
                OPT_LIST => self.opt_list(s, &data).await?,
                OPT_STARTTLS => self.opt_starttls(s, &data, tls_active).await?,
                OPT_INFO | OPT_GO => self.opt_info_go(s, oh.option, &data, st, &mut frozen, tls_active).await?,
                OPT_STRUCTURED_REPLY => self.opt_structured_reply(s, &data, st).await?,
                OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => self.opt_meta_context(s, oh.option, &data, st).await?,
                other => {
                    self.reply(s, other, REP_ERR_UNSUP, b"option not supported by ssdlab").await?;
                    None
                }
            };
            if let Some(h) = ended {
                return Ok(h);
            }
        }
        Err(ConnEnd::Protocol("more than 1024 options in one handshake".into()))
    }

    /// NBD_OPT_EXPORT_NAME: the export by name, then transmission (no way to refuse: an
    /// unknown name ends the session).
    async fn opt_export_name<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        s: &mut S,
        data: Vec<u8>,
        st: &Negotiation,
        frozen: &mut Option<Arc<Vec<u8>>>,
        tls_active: bool,
    ) -> Result<Haggle, ConnEnd> {
        let (structured, meta) = (st.structured, st.meta);
        let Ok(name) = String::from_utf8(data) else { return Err(ConnEnd::Protocol("export name is not UTF-8".into())) };
        // No way to return an error here: the session ends.
        let Some(idx) = self.find(&name) else { return Err(ConnEnd::Protocol(format!("unknown export {name:?}"))) };
        if idx == usize::MAX {
            *frozen = Some(self.frozen_metrics());
        }
        let mut r = Vec::with_capacity(134);
        r.extend_from_slice(&self.size_of(idx, frozen).to_be_bytes());
        r.extend_from_slice(&self.flags_for(idx, structured).to_be_bytes());
        if !st.no_zeroes {
            r.extend_from_slice(&[0u8; 124]);
        }
        s.write_all(&r).await?;
        s.flush().await?;
        Ok(Haggle::Go(Session { export: idx, structured, meta, frozen: frozen.clone(), tls: tls_active }))
    }

    /// NBD_OPT_LIST: the exports' names (the metrics export last).
    async fn opt_list<S: AsyncRead + AsyncWrite + Unpin>(&self, s: &mut S, data: &[u8]) -> Result<Option<Haggle>, ConnEnd> {
        if !data.is_empty() {
            self.reply(s, OPT_LIST, REP_ERR_INVALID, b"NBD_OPT_LIST takes no data").await?;
            return Ok(None);
        }
        for name in self.opts.exports.iter().map(|e| e.name.as_str()).chain([METRICS_EXPORT]) {
            let mut p = (name.len() as u32).to_be_bytes().to_vec();
            p.extend_from_slice(name.as_bytes());
            self.reply(s, OPT_LIST, REP_SERVER, &p).await?;
        }
        self.reply(s, OPT_LIST, REP_ACK, &[]).await?;
        Ok(None)
    }

    /// NBD_OPT_STARTTLS: acknowledged when TLS is configured and not yet running; the caller
    /// then starts it.
    async fn opt_starttls<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        s: &mut S,
        data: &[u8],
        tls_active: bool,
    ) -> Result<Option<Haggle>, ConnEnd> {
        if !data.is_empty() {
            self.reply(s, OPT_STARTTLS, REP_ERR_INVALID, b"NBD_OPT_STARTTLS takes no data").await?;
        } else if tls_active {
            self.reply(s, OPT_STARTTLS, REP_ERR_INVALID, b"TLS is already running").await?;
        } else if !self.tls {
            self.reply(s, OPT_STARTTLS, REP_ERR_POLICY, b"TLS is not configured on this server (--tls-cert, --tls-key)").await?;
        } else {
            self.reply(s, OPT_STARTTLS, REP_ACK, &[]).await?;
            return Ok(Some(Haggle::StartTls));
        }
        Ok(None)
    }

    /// NBD_OPT_INFO and NBD_OPT_GO: an export's size, flags, block sizes and the name and
    /// description asked for; GO then starts transmission.
    async fn opt_info_go<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        s: &mut S,
        option: u32,
        data: &[u8],
        st: &Negotiation,
        frozen: &mut Option<Arc<Vec<u8>>>,
        tls_active: bool,
    ) -> Result<Option<Haggle>, ConnEnd> {
        let (structured, meta) = (st.structured, st.meta);
        let go = match parse_go(data) {
            Ok(g) => g,
            Err(e) => {
                self.reply(s, option, REP_ERR_INVALID, e.0.as_bytes()).await?;
                return Ok(None);
            }
        };
        let Some(idx) = self.find(&go.name) else {
            self.reply(s, option, REP_ERR_UNKNOWN, format!("no export named {:?}; NBD_OPT_LIST shows them", go.name).as_bytes()).await?;
            return Ok(None);
        };
        if idx == usize::MAX {
            *frozen = Some(self.frozen_metrics());
        }
        let mut p = INFO_EXPORT.to_be_bytes().to_vec();
        p.extend_from_slice(&self.size_of(idx, frozen).to_be_bytes());
        p.extend_from_slice(&self.flags_for(idx, structured).to_be_bytes());
        self.reply(s, option, REP_INFO, &p).await?;
        let mut p = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
        for v in [1u32, 4096, self.opts.max_request] {
            p.extend_from_slice(&v.to_be_bytes());
        }
        self.reply(s, option, REP_INFO, &p).await?;
        for &i in &go.infos {
            let text = match i {
                INFO_NAME => Some(if idx == usize::MAX { METRICS_EXPORT.to_string() } else { self.opts.exports[idx].name.clone() }),
                INFO_DESCRIPTION => Some(if idx == usize::MAX {
                    "live metrics.json of this ssdlab server".to_string()
                } else {
                    self.opts.exports[idx].description.clone()
                }),
                _ => None,
            };
            if let Some(t) = text {
                let mut p = i.to_be_bytes().to_vec();
                p.extend_from_slice(t.as_bytes());
                self.reply(s, option, REP_INFO, &p).await?;
            }
        }
        self.reply(s, option, REP_ACK, &[]).await?;
        if option == OPT_GO {
            return Ok(Some(Haggle::Go(Session { export: idx, structured, meta, frozen: frozen.clone(), tls: tls_active })));
        }
        Ok(None)
    }

    /// NBD_OPT_STRUCTURED_REPLY: structured replies from now on.
    async fn opt_structured_reply<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        s: &mut S,
        data: &[u8],
        st: &mut Negotiation,
    ) -> Result<Option<Haggle>, ConnEnd> {
        if !data.is_empty() {
            self.reply(s, OPT_STRUCTURED_REPLY, REP_ERR_INVALID, b"NBD_OPT_STRUCTURED_REPLY takes no data").await?;
        } else {
            st.structured = true;
            self.reply(s, OPT_STRUCTURED_REPLY, REP_ACK, &[]).await?;
        }
        Ok(None)
    }

    /// NBD_OPT_LIST_META_CONTEXT and NBD_OPT_SET_META_CONTEXT: the one context served,
    /// base:allocation (block status).
    async fn opt_meta_context<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        s: &mut S,
        option: u32,
        data: &[u8],
        st: &mut Negotiation,
    ) -> Result<Option<Haggle>, ConnEnd> {
        if !st.structured {
            self.reply(s, option, REP_ERR_INVALID, b"negotiate structured replies first").await?;
            return Ok(None);
        }
        let m = match parse_meta(data) {
            Ok(m) => m,
            Err(e) => {
                self.reply(s, option, REP_ERR_INVALID, e.0.as_bytes()).await?;
                return Ok(None);
            }
        };
        if self.find(&m.name).is_none() {
            self.reply(s, option, REP_ERR_UNKNOWN, format!("no export named {:?}", m.name).as_bytes()).await?;
            return Ok(None);
        }
        let list = option == OPT_LIST_META_CONTEXT;
        let wanted =
            if list && m.queries.is_empty() { true } else { m.queries.iter().any(|q| q == BASE_ALLOCATION || (list && q == "base:")) };
        if !list {
            st.meta = wanted;
        }
        if wanted {
            let mut p = (if list { 0 } else { BASE_ALLOCATION_ID }).to_be_bytes().to_vec();
            p.extend_from_slice(BASE_ALLOCATION.as_bytes());
            self.reply(s, option, REP_META_CONTEXT, &p).await?;
        }
        self.reply(s, option, REP_ACK, &[]).await?;
        Ok(None)
    }

    fn flags_for(&self, idx: usize, structured: bool) -> u16 {
        let e = (idx != usize::MAX).then(|| &self.opts.exports[idx]);
        let f = self.export_flags(e);
        if structured {
            f
        } else {
            f & !FLAG_SEND_DF
        }
    }

    async fn reply<S: AsyncWrite + Unpin>(&self, s: &mut S, option: u32, kind: u32, payload: &[u8]) -> io::Result<()> {
        s.write_all(&option_reply(option, kind, payload)).await?;
        s.flush().await
    }
}
