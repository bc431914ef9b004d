import CMagickWand
import Foundation
import Synchronization

/// The one owner of a `MagickWand *`: creates it, frees it exactly once, and turns ImageMagick's
/// exceptions into Swift errors.
///
/// A `Wand` is not thread-safe and not `Sendable`; it lives inside one `PipelineImage.transformed(_:)` (MagickKit)
/// closure or one decode/encode call. Processors and codecs call its methods; only this file and
/// ``Magick`` touch the C API.
public final class Wand {
    let pointer: OpaquePointer

    /// A new, empty wand.
    public init() {
        Magick.initialize()
        pointer = NewMagickWand()
    }

    init(taking pointer: OpaquePointer) { self.pointer = pointer }

    deinit { _ = DestroyMagickWand(pointer) }

    /// A copy sharing pixel storage copy-on-write (cheap until the copy is modified).
    public func clone() -> Wand { Wand(taking: CloneMagickWand(pointer)) }

    // MARK: Errors

    /// ImageMagick's last message for this wand, or `fallback` when it gave none.
    public func lastError(_ fallback: String) -> String {
        var severity = UndefinedException
        guard let text = MagickGetException(pointer, &severity) else { return fallback }
        defer { _ = MagickRelinquishMemory(text) }
        MagickClearException(pointer)
        let message = Self.reason(String(cString: text))
        return message.isEmpty ? fallback : message
    }

    /// An ImageMagick message reduced to its reason: without the file name it appends in
    /// `quotes' (always "image" or empty here: blobs have no name) and its source position
    /// ("@ error/bmp.c/ReadBMPImage/870"), which mean nothing to a user.
    public static func reason(_ message: String) -> String {
        // Delegate libraries end lines inside their messages (OpenJPEG, libtiff): one line here.
        var reason = message.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty }.joined(separator: " ")
        if let position = reason.range(of: " @ ", options: .backwards),
           reason[position.upperBound...].range(of: #"^(error|warning|fatal)/"#, options: .regularExpression) != nil {
            reason = String(reason[..<position.lowerBound])
        }
        for name in [" `image'", " `'", " `image[0]'"] where reason.hasSuffix(name) { reason.removeLast(name.count) }
        return reason.trimmingCharacters(in: .whitespaces)
    }

    /// The exception left on the wand (a warning after a read that otherwise succeeded), and clears it.
    public func pendingException() -> (ExceptionType, String)? {
        var severity = UndefinedException
        guard let text = MagickGetException(pointer, &severity) else { return nil }
        defer { _ = MagickRelinquishMemory(text) }
        MagickClearException(pointer)
        guard severity != UndefinedException else { return nil }
        return (severity, Self.reason(String(cString: text)))
    }

    /// The exception recorded on the images themselves during a read (ImageMagick's coders put
    /// warnings such as "Premature end of JPEG file" there, not on the wand), or `nil`.
    public func imageException() -> (ExceptionType, String)? {
        guard let image = GetImageFromMagickWand(pointer) else { return nil }
        let exception = AcquireExceptionInfo()
        defer { _ = DestroyExceptionInfo(exception) }
        GetImageException(image, exception)
        guard let info = exception, info.pointee.severity != UndefinedException else { return nil }
        let reason = info.pointee.reason.map { Self.reason(String(cString: $0)) } ?? "unknown problem"
        return (info.pointee.severity, reason)
    }

    /// Throws a `PipelineError` of `kind` with ImageMagick's reason when `status` is false.
    @discardableResult
    public func check(_ status: MagickBooleanType, _ kind: ErrorKind, _ what: String) throws -> Wand {
        if status == MagickFalse { throw PipelineError(kind, lastError("\(what) failed")) }
        return self
    }

    // MARK: Reading

    /// Sets an artifact of the current image, such as `png:exclude-chunk`: a setting its coder
    /// reads from the image itself (where ``strip()`` leaves one), not from the wand's options.
    public func setArtifact(_ key: String, _ value: String) {
        _ = MagickSetImageArtifact(pointer, key, value)
    }

    /// Sets a coder option such as `jpeg:size` (before reading) or `png:compression-level`.
    public func setOption(_ key: String, _ value: String) {
        _ = MagickSetOption(pointer, key, value)
    }

    /// Reads only the header of `data` with the explicit coder `format` (never guessed from content).
    public func ping(_ data: Data, format: String) throws {
        _ = MagickSetFormat(pointer, format)
        let status = data.withUnsafeBytes { MagickPingImageBlob(pointer, $0.baseAddress, $0.count) }
        try check(status, .decodeFailed, "reading the \(format) header")
    }

    /// Decodes `data` with the explicit coder `format` (never guessed from content).
    ///
    /// - Parameter maxFrames: decode at most this many frames of a multi-frame file (a GIF or
    ///   WebP animation, a multi-page TIFF); the rest are never decoded. `nil` decodes all.
    public func read(_ data: Data, format: String, maxFrames: Int? = nil) throws {
        _ = MagickSetFormat(pointer, format)
        if let maxFrames {
            // ImageMagick reads a frame range from the "[first-last]" suffix of the file name.
            _ = MagickSetFilename(pointer, maxFrames == 1 ? "image[0]" : "image[0-\(maxFrames - 1)]")
        }
        let status = data.withUnsafeBytes { MagickReadImageBlob(pointer, $0.baseAddress, $0.count) }
        try check(status, .decodeFailed, "decoding \(format)")
    }

    /// Reads an ImageMagick built-in image or generator such as `rose:` or `plasma:`.
    /// For tests and samples only: never call this with untrusted text.
    ///
    /// The same spec and size give the same pixels every time: generators that draw random
    /// numbers (`plasma:`, `fractal:`) are seeded with a fixed key, as `-seed` does on the command
    /// line, so a test on them cannot pass or fail by chance.
    public func readBuiltIn(_ spec: String, size: (Int, Int)? = nil) throws {
        if let size { _ = MagickSetSize(pointer, size.0, size.1) }
        let status = Magick.withColourTable {
            // The key is process-wide and read when a generator acquires its random state; it is
            // put back (~0 is ImageMagick's "no key": seed from entropy) before anyone else reads.
            SetRandomSecretKey(1)
            defer { SetRandomSecretKey(~0) }
            return MagickReadImage(pointer, spec)
        }
        try check(status, .decodeFailed, "reading \(spec)")
    }

    /// Number of frames (images) in the wand.
    public var frameCount: Int { MagickGetNumberImages(pointer) }

    /// Drops every frame but the first.
    public func keepFirstFrame() throws {
        guard frameCount > 1 else { return }
        MagickResetIterator(pointer)
        _ = MagickNextImage(pointer)
        while MagickGetNumberImages(pointer) > 1 {
            MagickSetLastIterator(pointer)
            _ = MagickRemoveImage(pointer)
        }
        MagickResetIterator(pointer)
    }

    // MARK: Facts

    public var width: Int { MagickGetImageWidth(pointer) }
    public var height: Int { MagickGetImageHeight(pointer) }
    /// Whether the image carries an alpha channel.
    public var hasAlpha: Bool { MagickGetImageAlphaChannel(pointer) != MagickFalse }
    /// The coder name of the current image, e.g. `JPEG`.
    public var format: String {
        guard let text = MagickGetImageFormat(pointer) else { return "" }
        defer { _ = MagickRelinquishMemory(text) }
        return String(cString: text)
    }
    /// Bits per channel.
    public var depth: Int { MagickGetImageDepth(pointer) }
    public var colorspace: ColorspaceType { MagickGetImageColorspace(pointer) }

    /// The colour of one pixel, each channel from 0 to 1 (alpha 1 is opaque).
    public func pixel(x: Int, y: Int) throws -> (red: Double, green: Double, blue: Double, alpha: Double) {
        let color = NewPixelWand()
        defer { _ = DestroyPixelWand(color) }
        try check(MagickGetImagePixelColor(pointer, x, y, color), .processFailed, "reading pixel \(x),\(y)")
        return (PixelGetRed(color), PixelGetGreen(color), PixelGetBlue(color), PixelGetAlpha(color))
    }

    // MARK: Operations used by the built-in stages

    /// Resizes to exactly `width` x `height` with `filter`.
    public func resize(width: Int, height: Int, filter: FilterTypes = LanczosFilter) throws {
        try check(MagickResizeImage(pointer, width, height, filter, 1.0), .processFailed, "resize")
    }

    /// Scales by averaging the source pixels each destination pixel covers (a box filter): fast,
    /// and free of aliasing when shrinking, but softer than a windowed filter.
    public func scale(width: Int, height: Int) throws {
        try check(MagickScaleImage(pointer, width, height), .processFailed, "scale")
    }

    /// Crops to the rectangle and resets the virtual canvas so the result starts at 0,0.
    public func crop(x: Int, y: Int, width: Int, height: Int) throws {
        try check(MagickCropImage(pointer, width, height, x, y), .processFailed, "crop")
        _ = MagickSetImagePage(pointer, width, height, 0, 0)
    }

    /// The EXIF orientation (1 top-left ... 8 left-bottom) that ``autoOrient()`` applies; set by the
    /// coder when ImageMagick reads a file, or by a decoder that made the pixels itself.
    public var orientation: Int {
        get { Int(MagickGetImageOrientation(pointer).rawValue) }
        set { _ = MagickSetImageOrientation(pointer, OrientationType(rawValue: UInt32(max(0, min(8, newValue))))) }
    }

    /// The named profile (`exif`, `xmp`, `8bim`, `icc`...) as ImageMagick holds it, or `nil`.
    public func profile(_ name: String) -> Data? {
        var length = 0
        guard let bytes = MagickGetImageProfile(pointer, name, &length) else { return nil }
        defer { _ = MagickRelinquishMemory(bytes) }
        return length > 0 ? Data(bytes: bytes, count: length) : nil
    }

    /// Attaches a named profile (`exif`, `xmp`, `iptc`...) as it is, without touching the pixels.
    public func setProfile(_ name: String, _ data: Data) throws {
        let status = data.withUnsafeBytes { MagickSetImageProfile(pointer, name, $0.baseAddress, $0.count) }
        try check(status, .processFailed, "setting the \(name) profile")
    }

    /// Sets the resolution (`unit` as EXIF gives it: 2 per inch, 3 per centimetre, else undefined).
    public func setResolution(x: Double, y: Double, unit: Int) {
        _ = MagickSetImageResolution(pointer, x, y)
        _ = MagickSetImageUnits(pointer, unit == 2 ? PixelsPerInchResolution : unit == 3 ? PixelsPerCentimeterResolution
            : UndefinedResolution)
    }

    /// Applies the EXIF orientation and resets it to top-left. The virtual canvas is reset too:
    /// ImageMagick's transverse (orientation 7) leaves an offset on it, and a crop after it read
    /// from the wrong place (a 300x300 crop at 0,0 came out 1x1).
    public func autoOrient() throws {
        try check(MagickAutoOrientImage(pointer), .processFailed, "auto-orient")
        resetPage()
    }

    /// Converts to sRGB when the image is in another colour space (CMYK, ...).
    public func toSRGB() throws {
        let space = colorspace
        if space == sRGBColorspace || space == GRAYColorspace || space == RGBColorspace { return }
        try check(MagickTransformImageColorspace(pointer, sRGBColorspace), .decodeFailed, "colour conversion")
    }

    /// Removes the alpha channel by laying the image over `color` (an ImageMagick colour string).
    public func flatten(onto color: String) throws {
        guard hasAlpha else { return }
        let pixel = NewPixelWand()
        defer { _ = DestroyPixelWand(pixel) }
        _ = Magick.withColourTable { PixelSetColor(pixel, color) }
        _ = MagickSetImageBackgroundColor(pointer, pixel)
        try check(MagickSetImageAlphaChannel(pointer, RemoveAlphaChannel), .encodeFailed, "flatten")
        // Remove blends onto the background but leaves the (now opaque) channel on: turn it off.
        try check(MagickSetImageAlphaChannel(pointer, DeactivateAlphaChannel), .encodeFailed, "flatten")
    }

    /// Draws `other` over this image with its top-left corner at `x`, `y` (alpha blending).
    public func composite(_ other: Wand, x: Int, y: Int) throws {
        try check(MagickCompositeImage(pointer, other.pointer, OverCompositeOp, x, y), .processFailed, "composite")
    }

    /// Puts `other`'s pixels (alpha included) in place of this image's, with its top-left corner at `x`, `y`.
    public func replace(with other: Wand, x: Int, y: Int) throws {
        try check(MagickCompositeImage(pointer, other.pointer, CopyCompositeOp, x, y), .processFailed, "copy")
    }

    /// Makes the image grey (luminance), kept in sRGB so later colour operations apply.
    public func grayscale() throws {
        try check(MagickTransformImageColorspace(pointer, GRAYColorspace), .processFailed, "grayscale")
        try check(MagickTransformImageColorspace(pointer, sRGBColorspace), .processFailed, "grayscale")
    }

    /// Maps black to `dark` and white to `light` (ImageMagick colour strings), interpolating
    /// between: with ``grayscale()`` first, a duotone.
    public func levelColors(dark: String, light: String) throws {
        let black = NewPixelWand(), white = NewPixelWand()
        defer { _ = DestroyPixelWand(black); _ = DestroyPixelWand(white) }
        let known = Magick.withColourTable {
            PixelSetColor(black, dark) != MagickFalse && PixelSetColor(white, light) != MagickFalse
        }
        guard known else {
            throw PipelineError(.processFailed, "not a colour: '\(dark)' or '\(light)'")
        }
        // invert = true is +level-colors: black and white become the two colours (false would do the reverse).
        try check(MagickLevelImageColors(pointer, black, white, MagickTrue), .processFailed, "level colours")
    }

    /// Whether ImageMagick understands `color` (`red`, `#ff8800`, `rgba(0,0,0,0.5)`).
    public static func isColor(_ color: String) -> Bool {
        (try? withColor(color) { _ in true }) ?? false
    }

    /// Removes profiles and comments.
    public func strip() throws {
        try check(MagickStripImage(pointer), .encodeFailed, "strip")
    }

    // MARK: Writing

    /// A copy with every channel of the current image moved up by half an 8-bit level, so that
    /// ImageMagick's PNG writer, which truncates its 16-bit values to 8 bits, rounds them; `nil`
    /// for a palette image.
    ///
    /// ImageMagick keeps 16 bits a channel. Of the writers the encoders use at depth 8, this
    /// build's PNG coder alone truncates (its TIFF, BMP, GIF, WebP, JPEG, AVIF and HEIC writers
    /// round: `EncoderTests.eightBitOutputsRoundSixteenBitValues`), so every PNG ImageMagick wrote
    /// from resized pixels (grey ones, palette targets, kept metadata) came out half a level darker
    /// on average, about 2 dB of PSNR. With 128 added (of 257 a level), `floor((q + 128) / 257)` is
    /// `q / 257` rounded, and pixels that already are 8-bit values stay as they are. Palette
    /// images keep their palette (their colours are 8-bit).
    func roundedForEightBits() throws -> Wand? {
        guard let image = GetImageFromMagickWand(pointer), image.pointee.storage_class == DirectClass else { return nil }
        let copy = clone()
        try copy.check(MagickEvaluateImageChannel(copy.pointer, AllChannels, AddEvaluateOperator, 128), .encodeFailed, "rounding to 8 bits")
        return copy
    }

    /// Encodes the current image with the explicit coder `format`.
    ///
    /// - Parameters:
    ///   - quality: compression quality 1...100 where the coder uses one.
    ///   - options: coder options set before writing, e.g. `["webp:lossless": "true"]`.
    ///   - allFrames: write every frame (an animation) instead of the current one.
    public func encode(format: String, quality: Int? = nil, depth: Int? = 8,
                       options: [String: String] = [:], allFrames: Bool = false) throws -> Data {
        // ImageMagick's PNG writer truncates to 8 bits: a copy moved up by half a level is written
        // (this wand's pixels stay as they are, so encoding it again writes the same).
        if depth == 8, format == "PNG", let rounded = try roundedForEightBits() {
            return try rounded.write(format: format, quality: quality, depth: depth, options: options, allFrames: allFrames)
        }
        return try write(format: format, quality: quality, depth: depth, options: options, allFrames: allFrames)
    }

    private func write(format: String, quality: Int?, depth: Int?, options: [String: String], allFrames: Bool) throws -> Data {
        // The wand's format (set when reading) overrides the image's in ImageToBlob: set both.
        try check(MagickSetFormat(pointer, format), .encodeFailed, "setting format \(format)")
        try check(MagickSetImageFormat(pointer, format), .encodeFailed, "setting format \(format)")
        if let quality {
            _ = MagickSetCompressionQuality(pointer, quality)
            _ = MagickSetImageCompressionQuality(pointer, quality)
        }
        if let depth { _ = MagickSetImageDepth(pointer, depth) }
        for (key, value) in options { setOption(key, value) }
        var length = 0
        let blob = { [pointer, frameCount] in
            allFrames && frameCount > 1 ? MagickGetImagesBlob(pointer, &length) : MagickGetImageBlob(pointer, &length)
        }
        let written = Magick.namingCoders.contains(format.uppercased()) ? Magick.withColourTable(blob) : blob()
        guard let blob = written else {
            throw PipelineError(.encodeFailed, lastError("encoding \(format) produced no data"))
        }
        defer { _ = MagickRelinquishMemory(blob) }
        guard length > 0 else { throw PipelineError(.encodeFailed, lastError("encoding \(format) produced no data")) }
        return Data(bytes: blob, count: length)
    }
}
