//! Block-level wear studies (see below).
