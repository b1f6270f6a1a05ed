//! Gives back the code pages that only start-up used.
//!
//! Most of an idle runner's resident set was its own executable: every page
//! of code and read-only data that start-up ran through (arguments and
//! settings, the state database's schema, the HTTP/2 client, registration,
//! each SDK's probe) stayed mapped after start-up was over, and the kernel's
//! fault-around maps up to 16 pages around each one touched.
//!
//! Those pages are clean copies of the file. Once start-up is over,
//! `MADV_DONTNEED` on the never-written segments of the executable and of
//! the libraries it loaded (libc, libm, the dynamic loader) unmaps them;
//! what the runner goes on running faults back in from the page cache (a
//! minor fault, no I/O). The pages stay in the page cache: this shrinks the
//! runner's RSS, not the machine's cache, which the kernel reclaims when it
//! needs to either way.
//!
//! Only segments the process never writes are touched: loaded, not
//! writable, outside the RELRO range (relocated at load, so its pages are
//! private copies that must stay), of an object without text relocations,
//! loaded by absolute path (not the vDSO), and not in a mapping where any
//! page has become a private copy (`Anonymous:` in `/proc/self/smaps`: a
//! debugger's breakpoint, a uprobe, code patched at run time). Anything
//! else keeps its pages.

use std::ffi::{c_int, c_void};

/// `DT_TEXTREL`, `DT_FLAGS` and its `DF_TEXTREL` bit, from `<elf.h>`.
const DT_NULL: i64 = 0;
const DT_TEXTREL: i64 = 22;
const DT_FLAGS: i64 = 30;
const DF_TEXTREL: u64 = 0x4;

/// An entry of the dynamic section (`Elf64_Dyn`).
#[repr(C)]
struct Dyn {
    tag: i64,
    val: u64,
}

/// A range of addresses, `[start, end)`.
type Range = (usize, usize);

/// The walk over the loaded objects: what it needs and what it released.
struct Walk {
    /// No object seen yet: the next is the executable.
    first: bool,
    page: usize,
    /// Mappings holding a page that is no longer the file's (see
    /// [`changed_mappings`]): never released.
    changed: Vec<Range>,
    /// Bytes unmapped so far.
    released: usize,
}

/// Unmaps the loaded objects' never-written pages; they fault back in from
/// the page cache as they are used. Returns the bytes unmapped (whether
/// resident or not); nothing when the process's mappings cannot be read.
pub fn release() -> usize {
    let smaps = std::fs::File::open("/proc/self/smaps").map(std::io::BufReader::new);
    let changed = match smaps.and_then(changed_mappings) {
        Ok(changed) => changed,
        Err(e) => {
            tracing::debug!(error = %e, "start-up pages kept: /proc/self/smaps unreadable");
            return 0;
        }
    };
    let mut walk = Walk {
        first: true,
        page: page_size(),
        changed,
        released: 0,
    };
    // SAFETY: `release_object` is called synchronously, only during this
    // call, with the pointer to `walk`, which outlives it.
    unsafe {
        libc::dl_iterate_phdr(Some(release_object), (&raw mut walk).cast());
    }
    tracing::debug!(
        kib = walk.released / 1024,
        "start-up over: released the pages of its code"
    );
    walk.released
}

/// The mappings of `smaps` (`/proc/self/smaps`) that hold anonymous
/// pages: a private file mapping's page once written (a text relocation, a
/// debugger's breakpoint, a uprobe, code patched at run time) is an
/// anonymous copy, and dropping it would bring back the file's bytes. Read
/// a line at a time: the whole file is a few hundred KiB the runner would
/// otherwise allocate just before it idles.
fn changed_mappings(mut smaps: impl std::io::BufRead) -> std::io::Result<Vec<Range>> {
    let mut changed = Vec::new();
    let mut current = None;
    let mut line = String::new();
    loop {
        line.clear();
        if smaps.read_line(&mut line)? == 0 {
            return Ok(changed);
        }
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((start, end)) = first.split_once('-')
            && let (Ok(start), Ok(end)) = (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            )
        {
            current = Some((start, end));
        } else if let Some(kib) = line.strip_prefix("Anonymous:")
            && kib.trim().trim_end_matches("kB").trim() != "0"
            && let Some(range) = current
        {
            changed.push(range);
        }
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096).max(4096)
}

/// `dl_iterate_phdr`'s callback, once per loaded object (the first is the
/// executable, then the libraries). Releases the object's loaded,
/// non-writable segments outside RELRO, unless it has text relocations or
/// a segment overlaps a changed mapping. The `madvise` happens here, while
/// the loader's lock is held, so no object can be unmapped (and its
/// addresses reused) between finding a segment and releasing it.
unsafe extern "C" fn release_object(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: glibc passes a valid `dl_phdr_info` whose program headers
    // are mapped, and `data` is the `Walk` given in `release`.
    let (info, walk) = unsafe { (&*info, &mut *data.cast::<Walk>()) };
    let first = std::mem::replace(&mut walk.first, false);
    if info.dlpi_phdr.is_null() || !(first || loaded_by_path(info)) {
        return 0;
    }
    // SAFETY: as above: `dlpi_phnum` headers at `dlpi_phdr`.
    let headers =
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    let base = info.dlpi_addr as usize;
    let at = |vaddr: u64| base.wrapping_add(vaddr as usize);
    // SAFETY: a PT_DYNAMIC header's address is the loaded dynamic section.
    if headers
        .iter()
        .any(|h| h.p_type == libc::PT_DYNAMIC && unsafe { text_relocations(at(h.p_vaddr)) })
    {
        return 0;
    }
    let relro = headers
        .iter()
        .find(|h| h.p_type == libc::PT_GNU_RELRO)
        .map(|h| (at(h.p_vaddr), at(h.p_vaddr + h.p_memsz)));
    let overlaps = |a: Range, b: Range| a.0 < b.1 && b.0 < a.1;
    for h in headers {
        if h.p_type != libc::PT_LOAD || h.p_flags & libc::PF_W != 0 {
            continue;
        }
        // Whole pages inside the segment only.
        let start = at(h.p_vaddr).next_multiple_of(walk.page);
        let end = at(h.p_vaddr + h.p_filesz) / walk.page * walk.page;
        if end <= start || relro.is_some_and(|r| overlaps((start, end), r)) {
            continue;
        }
        // The segment less its changed mappings (in address order, as
        // smaps lists them; their bounds are page bounds).
        let mut from = start;
        let changed = walk
            .changed
            .iter()
            .copied()
            .filter(|c| overlaps((start, end), *c));
        for (c_start, c_end) in changed.chain([(end, end)]) {
            let until = c_start.min(end);
            if from < until {
                // SAFETY: the range lies in a loaded, never-written
                // segment of an object loaded from a file, and no page of
                // it is a changed copy: they equal the file's, and dropping
                // them changes no byte the process reads.
                let advised = unsafe {
                    libc::madvise(from as *mut c_void, until - from, libc::MADV_DONTNEED)
                };
                if advised == 0 {
                    walk.released += until - from;
                }
            }
            from = from.max(c_end);
        }
    }
    0
}

/// Whether a library was loaded by absolute path (libc, libm, the dynamic
/// loader), unlike the vDSO, whose pages the kernel provides.
fn loaded_by_path(info: &libc::dl_phdr_info) -> bool {
    // SAFETY: a non-null `dlpi_name` is a NUL-terminated string.
    !info.dlpi_name.is_null()
        && unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }
            .to_bytes()
            .starts_with(b"/")
}

/// Whether the dynamic section at `addr` asks for text relocations (then
/// read-only segments were written at load and must keep their pages).
///
/// # Safety
/// `addr` must be a loaded dynamic section, ended by `DT_NULL`.
unsafe fn text_relocations(addr: usize) -> bool {
    let mut entry = addr as *const Dyn;
    loop {
        // SAFETY: entries up to and including DT_NULL are readable.
        let d = unsafe { &*entry };
        match d.tag {
            DT_NULL => return false,
            DT_TEXTREL => return true,
            DT_FLAGS if d.val & DF_TEXTREL != 0 => return true,
            _ => {}
        }
        // SAFETY: not DT_NULL yet, so another entry follows.
        entry = unsafe { entry.add(1) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pointers the loader relocated: they live in the RELRO range, which
    /// must keep its pages (unrelocated file bytes would be garbage).
    static NAMES: &[&str] = &["alpha", "beta", "gamma"];

    /// Resident KiB of the mappings that are not writable, of the files
    /// whose path `of` accepts.
    fn resident_readonly_kib(of: impl Fn(&str) -> bool) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut total = 0;
        let mut counting = false;
        for line in smaps.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields
                .first()
                .is_some_and(|f| f.contains('-') && !f.ends_with(':'))
            {
                counting = fields.get(5).is_some_and(|path| of(path))
                    && fields.get(1).is_some_and(|p| !p.contains('w'));
            } else if counting && fields.first() == Some(&"Rss:") {
                total += fields[1].parse::<u64>().unwrap();
            }
        }
        total
    }

    #[test]
    fn mappings_with_private_copies_are_found() {
        let smaps = "\
55d0c0000000-55d0c0010000 r-xp 00000000 fd:01 42 /usr/bin/x
Rss:                  64 kB
Anonymous:             0 kB
55d0c0010000-55d0c0011000 r-xp 00010000 fd:01 42 /usr/bin/x
Rss:                   4 kB
Anonymous:             4 kB
7f0000000000-7f0000021000 rw-p 00000000 00:00 0
Anonymous:           132 kB
VmFlags: rd wr mr mw me ac
";
        assert_eq!(
            changed_mappings(smaps.as_bytes()).unwrap(),
            vec![
                (0x55d0_c001_0000, 0x55d0_c001_1000),
                (0x7f00_0000_0000, 0x7f00_0002_1000)
            ]
        );
    }

    /// Whether the page at `addr` is in a mapping with private copies.
    fn in_changed_mapping(addr: usize) -> bool {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        changed_mappings(smaps.as_bytes())
            .unwrap()
            .iter()
            .any(|&(s, e)| s <= addr && addr < e)
    }

    /// Writes a code page of this executable with its own bytes, as a
    /// breakpoint or a uprobe writes one (without changing it): the page
    /// becomes a private copy. Returns its address.
    fn patch_a_code_page() -> usize {
        let page = page_size();
        let code = (mappings_with_private_copies_are_found as fn()) as usize / page * page;
        // SAFETY: `code` is a mapped page of this executable's code.
        let protect = |p| unsafe { libc::mprotect(code as *mut c_void, page, p) };
        assert_eq!(
            protect(libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC),
            0
        );
        // SAFETY: the page is mapped and now writable; its first byte is
        // written with its own value, so the code it holds does not change.
        unsafe {
            let byte = code as *mut u8;
            byte.write_volatile(byte.read_volatile());
        }
        assert_eq!(protect(libc::PROT_READ | libc::PROT_EXEC), 0);
        assert!(
            in_changed_mapping(code),
            "the written page is not seen as a private copy"
        );
        code
    }

    /// One test, so no other release runs between its measurements.
    #[test]
    fn release_drops_read_only_pages_and_keeps_relocated_data_and_patched_code() {
        let patched = patch_a_code_page();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_string_lossy().into_owned();
        let of_exe = |path: &str| path == exe;
        let of_libc = |path: &str| path.contains("/libc.so");
        let before = (
            resident_readonly_kib(of_exe),
            resident_readonly_kib(of_libc),
        );
        let released = release();
        let after = (
            resident_readonly_kib(of_exe),
            resident_readonly_kib(of_libc),
        );
        assert!(released > 0, "nothing released");
        assert!(
            after.0 < before.0,
            "the executable's resident read-only pages: {} KiB before, {} KiB after",
            before.0,
            after.0
        );
        // A dynamically linked libc (glibc: the runner's builds and image).
        if before.1 > 0 {
            assert!(
                after.1 < before.1,
                "libc's resident read-only pages: {} KiB before, {} KiB after",
                before.1,
                after.1
            );
        }
        assert!(
            in_changed_mapping(patched),
            "the patched code page was dropped"
        );
        // Relocated pointers still point at their strings, and code still runs.
        assert_eq!(NAMES.iter().map(|n| n.len()).sum::<usize>(), 14);
        assert_eq!(format!("{}", NAMES[2]), "gamma");
    }
}
