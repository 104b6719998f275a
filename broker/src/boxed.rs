//! The boxed future that trait methods return (the store's write operations,
//! the backends' issue and revoke): one alias in a leaf module, so a backend
//! names it without depending on the store, and the store without depending on
//! a backend.

use std::future::Future;
use std::pin::Pin;

/// A `Send` future on the heap, borrowing for `'a`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
