//! Unit tests only: an allocator that counts the bytes one thread
//! allocates inside [`counted`], so a test measures real heap cost while
//! other tests run in parallel.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    /// Bytes allocated by this thread while counting (None: not counting).
    static COUNT: Cell<Option<usize>> = const { Cell::new(None) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // try_with: the thread-local may be gone while a thread exits.
        let _ = COUNT.try_with(|c| c.set(c.get().map(|n| n + layout.size())));
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Run `f` and return its value with the bytes this thread allocated
/// meanwhile (frees not subtracted).
pub fn counted<T>(f: impl FnOnce() -> T) -> (T, usize) {
    COUNT.with(|c| c.set(Some(0)));
    let v = f();
    let n = COUNT.with(|c| c.replace(None)).unwrap_or(0);
    (v, n)
}
