//! In-memory link with fault injection (infra helper).
