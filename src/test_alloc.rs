//! Unit tests only: an allocator that counts the bytes one thread
//! allocates inside [`counted`], so a test measures real heap cost while
//! other tests run in parallel.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    /// Bytes allocated by this thread while counting (None: not counting).
    static COUNT: Cell<Option<usize>> = const { Cell::new(None) };
    /// Heap this thread holds from what it allocated while counting,
    /// as malloc sees it (usable size plus the chunk header).
    static LIVE: Cell<Option<isize>> = const { Cell::new(None) };
}

/// What a malloc chunk of this allocation really takes.
fn chunk(ptr: *mut u8) -> isize {
    // SAFETY: ptr came from System.alloc (malloc) and is still live.
    (unsafe { libc::malloc_usable_size(ptr.cast()) } + std::mem::size_of::<usize>()) as isize
}

// SAFETY: every call is passed to System unchanged; the counting only
// reads the sizes it is given and the chunk System returned.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // try_with: the thread-local may be gone while a thread exits.
        let _ = COUNT.try_with(|c| c.set(c.get().map(|n| n + layout.size())));
        let ptr = System.alloc(layout);
        if !ptr.is_null() && layout.align() <= 16 {
            let _ = LIVE.try_with(|c| c.set(c.get().map(|n| n + chunk(ptr))));
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.align() <= 16 {
            let _ = LIVE.try_with(|c| c.set(c.get().map(|n| n - chunk(ptr))));
        }
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Run `f` and return its value with the bytes this thread allocated
/// meanwhile (frees not subtracted).
pub(crate) fn counted<T>(f: impl FnOnce() -> T) -> (T, usize) {
    COUNT.with(|c| c.set(Some(0)));
    let v = f();
    let n = COUNT.with(|c| c.replace(None)).unwrap_or(0);
    (v, n)
}

/// Run `f` and return its value with the heap this thread still holds
/// from what it allocated meanwhile, as malloc counts it (a value `f`
/// builds and returns is held; its temporaries are not).
pub(crate) fn held<T>(f: impl FnOnce() -> T) -> (T, isize) {
    LIVE.with(|c| c.set(Some(0)));
    let v = f();
    let n = LIVE.with(|c| c.replace(None)).unwrap_or(0);
    (v, n)
}
