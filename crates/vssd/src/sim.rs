//! Timed multi-tenant runs (see below).
