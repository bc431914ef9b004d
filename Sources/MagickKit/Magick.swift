import CMagickWand
import Foundation
import Synchronization

/// Process-wide ImageMagick facts and set-up.
///
/// The engine calls ``initialize()`` before any stage runs: it starts MagickWand once and limits
/// ImageMagick's own threads to one, because the engine runs images side by side, one per core.
public enum Magick {
    private static let setUp: Void = {
        MagickWandGenesis()
        // Parallelism comes from running images side by side; OpenMP inside each would oversubscribe.
        _ = MagickSetResourceLimit(ThreadResource, 1)
        let exception = AcquireExceptionInfo()
        _ = SetMagickSecurityPolicy(securityPolicy, exception)
        _ = DestroyExceptionInfo(exception)
    }()

    /// Coders no pipeline needs and attackers love (ImageTragick and after): scripts, text and
    /// pseudo-files that read other files, network fetchers, PostScript and PDF (Ghostscript), and
    /// indirect `@file` reads; and every delegate (external program: Ghostscript, Inkscape, ffmpeg),
    /// which no built-in needs. Added to the machine's `policy.xml` (which may forbid more; this can
    /// only forbid, never allow). MVG stays readable: the SVG coder draws through it, and SVG is
    /// only read when a pipeline sets `allow_svg`, after `SVGScreen`-style checks.
    public static let blockedCoders = [
        "MSL", "TEXT", "TXT", "LABEL", "CAPTION", "PANGO", "EPHEMERAL", "INLINE", "URL", "HTTP", "HTTPS", "FTP",
        "PS", "PS2", "PS3", "EPS", "EPI", "EPSF", "EPSI", "EPT", "PDF", "PDFA", "AI", "XPS", "SHOW", "WIN", "X", "SCAN", "VID",
    ]

    static let securityPolicy = """
        <policymap>
          <policy domain="coder" rights="none" pattern="{\(blockedCoders.joined(separator: ","))}" />
          <policy domain="path" rights="none" pattern="@*" />
          <policy domain="delegate" rights="none" pattern="*" />
        </policymap>
        """

    /// Guards two process-wide ImageMagick tables that its own locks leave open.
    ///
    /// - The random key generators read (``Wand/readBuiltIn(_:size:)`` sets and resets it).
    /// - The colour-name list's one shared iterator. A name lookup (`PixelSetColor`, the `xc:`,
    ///   `gradient:` and `plasma:` generators) walks it under ImageMagick's lock, but the reverse
    ///   lookup the XPM, PICON and TXT writers make (`QueryColorname`) walks it without, so a
    ///   lookup beside such a write can miss a name it knows ("unrecognized color `fractal'").
    ///
    /// Every colour-name lookup MagickKit makes, and every write in a ``namingCoders`` format,
    /// runs under this lock.
    static func withColourTable<T>(_ body: () throws -> T) rethrows -> T {
        try colourTable.withLock { _ in try body() }
    }

    private static let colourTable = Mutex(())

    /// Writers that look colours up by value in ImageMagick's colour-name list (see ``withColourTable(_:)``).
    static let namingCoders: Set<String> = ["XPM", "PICON", "TXT", "SPARSE-COLOR"]

    /// Starts MagickWand (once per process), sets ImageMagick's thread limit to 1 and forbids the
    /// ``blockedCoders``.
    public static func initialize() { _ = setUp }

    /// Makes glibc return the memory of large images to the system as soon as they are freed.
    ///
    /// glibc raises its mmap threshold each time a large block is freed, up to 32 MB, after which
    /// decode buffers below that size come from per-thread heaps that keep their freed pages: on
    /// the corpus this held peak RSS near 365 MB instead of 285 MB, at no measurable speed cost.
    /// Fixing the threshold at 4 MB stops that. Process-wide, so the command-line tool calls it
    /// once at start; an application embedding PipelineKit decides for itself.
    ///
    /// Fixing it also fixes glibc's trim threshold at its 128 KB default (glibc would otherwise
    /// raise it with the mmap threshold): every item's buffers below 4 MB (decoded rows, the
    /// resampler's, the box reducer's) went back to the system at each free and came back as
    /// fresh zeroed pages, 5,500 page faults per 5 MP JPEG. Up to 32 MB free at the top of each
    /// heap is kept instead: 10% less CPU for JPEG thumbnails (`run` of 72 corpus JPEGs, two
    /// workers: 4.43 s to 4.02 s of CPU, page faults 400k to 280k) for 20-35 MB more peak RSS.
    /// (glibc's own dynamic rule would keep up to twice the mmap threshold, up to 64 MB.)
    public static func returnLargeBlocksToTheSystem() {
        _ = pk_set_mmap_threshold(4 << 20)
        _ = pk_set_trim_threshold(32 << 20)
    }

    /// The ImageMagick version string, e.g. `ImageMagick 6.9.11-60 Q16 x86_64 ...`.
    public static var version: String {
        initialize()
        var number = 0
        guard let text = MagickGetVersion(&number) else { return "unknown" }
        return String(cString: text)
    }

    /// Whether this ImageMagick build, under the machine's security policy, can write `format`
    /// (an ImageMagick coder name such as `JPEG`, `WEBP`, `AVIF`).
    public static func canWrite(_ format: String) -> Bool { supports(format, write: true) }

    /// Whether this ImageMagick build, under the machine's security policy, can read `format`.
    public static func canRead(_ format: String) -> Bool { supports(format, write: false) }

    /// Answers already given: a format's module is loaded, and its policy read, once.
    private static let supported = Mutex<[String: Bool]>([:])

    private static func supports(_ format: String, write: Bool) -> Bool {
        let key = (write ? "w:" : "r:") + format
        if let known = supported.withLock({ $0[key] }) { return known }
        let answer = askSupports(format, write: write)
        supported.withLock { $0[key] = answer }
        return answer
    }

    private static func askSupports(_ format: String, write: Bool) -> Bool {
        initialize()
        let exception = AcquireExceptionInfo()
        defer { _ = DestroyExceptionInfo(exception) }
        guard let info = GetMagickInfo(format, exception) else { return false }
        let coderAllowed = IsRightsAuthorized(CoderPolicyDomain, write ? WritePolicyRights : ReadPolicyRights, format)
        guard coderAllowed != MagickFalse else { return false }
        return write ? info.pointee.encoder != nil : info.pointee.decoder != nil
    }

    /// The current value of one of ImageMagick's resource limits (for example `AreaResource`),
    /// after the machine's `policy.xml` was applied.
    public static func resourceLimit(_ resource: ResourceType) -> UInt64 {
        initialize()
        return UInt64(MagickGetResourceLimit(resource))
    }
}
