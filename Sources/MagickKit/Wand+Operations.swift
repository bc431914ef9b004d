import CMagickWand
import Foundation

/// ImageMagick's largest channel value at this build's quantum depth (65535 for Q16).
public let magickQuantumRange = Double(QuantumRange)

/// A `PixelWand` for `color`, destroyed after `body`; throws `invalid_option` for a colour
/// ImageMagick does not understand.
func withColor<T>(_ color: String, _ body: (OpaquePointer) throws -> T) throws -> T {
    Magick.initialize()
    let pixel = NewPixelWand()!
    defer { _ = DestroyPixelWand(pixel) }
    guard Magick.withColourTable({ PixelSetColor(pixel, color) }) != MagickFalse else {
        _ = PixelClearException(pixel)
        throw PipelineError(.processFailed, "not a colour: '\(color)'")
    }
    return try body(pixel)
}

/// The operations behind the built-in processors. Each is one ImageMagick call (or a few) on the
/// current image, with ImageMagick's reason in the error when it fails.
extension Wand {
    // MARK: Filters

    /// Gaussian blur (a separable one-dimensional kernel in each direction). `radius` 0 lets
    /// ImageMagick choose it from `sigma`.
    public func blur(radius: Double, sigma: Double) throws {
        try check(MagickBlurImage(pointer, radius, sigma), .processFailed, "blur")
    }

    /// Sharpens with a Gaussian operator.
    public func sharpen(radius: Double, sigma: Double) throws {
        try check(MagickSharpenImage(pointer, radius, sigma), .processFailed, "sharpen")
    }

    /// Unsharp mask: `amount` of the difference from a blur of `sigma` is added back where it
    /// exceeds `threshold` (a fraction of the full range).
    public func unsharpMask(radius: Double, sigma: Double, amount: Double, threshold: Double) throws {
        try check(MagickUnsharpMaskImage(pointer, radius, sigma, amount, threshold), .processFailed, "unsharp")
    }

    /// Sepia tone; `threshold` is a fraction (0...1) of the full range.
    public func sepia(threshold: Double) throws {
        try check(MagickSepiaToneImage(pointer, threshold * magickQuantumRange), .processFailed, "sepia")
    }

    /// Brightness, saturation and hue in percent (100 leaves each unchanged).
    public func modulate(brightness: Double, saturation: Double, hue: Double) throws {
        try check(MagickModulateImage(pointer, brightness, saturation, hue), .processFailed, "modulate")
    }

    /// Blends `color` over every pixel by `amount` (0...1).
    public func colorize(_ color: String, amount: Double) throws {
        let percent = String(format: "rgb(%.4f%%,%.4f%%,%.4f%%)", amount * 100, amount * 100, amount * 100)
        _ = try withColor(color) { tint in
            try withColor(percent) { opacity in
                try check(MagickColorizeImage(pointer, tint, opacity), .processFailed, "tint")
            }
        }
    }

    /// Inverts the colours (alpha is kept).
    public func negate() throws {
        try check(MagickNegateImage(pointer, MagickFalse), .processFailed, "negate")
    }

    /// Sigmoidal contrast around mid-grey: `strength` > 0 increases contrast, < 0 reduces it.
    public func sigmoidalContrast(strength: Double) throws {
        guard strength != 0 else { return }
        try check(MagickSigmoidalContrastImage(pointer, strength > 0 ? MagickTrue : MagickFalse, abs(strength),
                                               magickQuantumRange / 2), .processFailed, "contrast")
    }

    // MARK: Geometry

    /// Rotates clockwise by `degrees`, filling uncovered corners with `background`.
    public func rotate(degrees: Double, background: String) throws {
        try withColor(background) { color in
            if Self.colorIsTransparent(background) { try ensureAlpha() }
            try check(MagickRotateImage(pointer, color, degrees), .processFailed, "rotate")
        }
        resetPage()
    }

    /// Mirrors top to bottom.
    public func flip() throws { try check(MagickFlipImage(pointer), .processFailed, "flip") }

    /// Mirrors left to right.
    public func flop() throws { try check(MagickFlopImage(pointer), .processFailed, "flop") }

    /// Places the image at `x`, `y` on a `width` x `height` canvas of `background` (the canvas may
    /// be smaller, which crops).
    public func extent(width: Int, height: Int, x: Int, y: Int, background: String) throws {
        try withColor(background) { color in
            if Self.colorIsTransparent(background) { try ensureAlpha() }
            _ = MagickSetImageBackgroundColor(pointer, color)
            // ImageMagick's offset is the canvas's origin in the image's coordinates.
            try check(MagickExtentImage(pointer, width, height, -x, -y), .processFailed, "extend")
        }
        resetPage()
    }

    /// Adds a border of `width` pixels left and right and `height` pixels top and bottom.
    public func border(color: String, width: Int, height: Int) throws {
        try withColor(color) { c in
            // Copy, not Over: transparent areas inside stay transparent instead of taking the border colour.
            _ = MagickSetImageCompose(pointer, CopyCompositeOp)
            try check(MagickBorderImage(pointer, c, width, height), .processFailed, "border")
            _ = MagickSetImageCompose(pointer, OverCompositeOp)
        }
        resetPage()
    }

    /// Removes edges of the same colour as the corners, within `fuzz` (a fraction of the range).
    public func trim(fuzz: Double) throws {
        try check(MagickTrimImage(pointer, fuzz * magickQuantumRange), .processFailed, "trim")
        resetPage()
    }

    /// Forgets the virtual canvas offset, so the image starts at 0,0 with its own size.
    public func resetPage() {
        _ = MagickSetImagePage(pointer, width, height, 0, 0)
    }

    // MARK: Alpha and compositing

    /// Gives the image an alpha channel (opaque) when it has none.
    public func ensureAlpha() throws {
        guard !hasAlpha else { return }
        try check(MagickSetImageAlphaChannel(pointer, OpaqueAlphaChannel), .processFailed, "adding alpha")
    }

    /// Multiplies alpha by `factor` (0...1).
    public func multiplyAlpha(_ factor: Double) throws {
        try ensureAlpha()
        try check(MagickEvaluateImageChannel(pointer, AlphaChannel, MultiplyEvaluateOperator, factor),
                  .processFailed, "opacity")
    }

    /// Keeps this image only where `mask` is opaque (the mask's alpha becomes this image's).
    public func mask(with mask: Wand) throws {
        try ensureAlpha()
        try check(MagickCompositeImage(pointer, mask.pointer, DstInCompositeOp, 0, 0), .processFailed, "mask")
    }

    static func colorIsTransparent(_ color: String) -> Bool {
        (try? withColor(color) { PixelGetAlpha($0) < 1 }) ?? false
    }

    /// A new wand holding one `width` x `height` image filled with `color`.
    public static func canvas(width: Int, height: Int, color: String) throws -> Wand {
        let wand = Wand()
        _ = try withColor(color) { c in
            try wand.check(MagickNewImage(wand.pointer, width, height, c), .processFailed, "new canvas")
        }
        // The pixels carry the colour's opacity; make ImageMagick use it.
        if colorIsTransparent(color) { _ = MagickSetImageAlphaChannel(wand.pointer, ActivateAlphaChannel) }
        return wand
    }

    // MARK: Drawing (shapes only: never MVG text from input)

    /// A shape to draw with ``draw(_:fill:stroke:strokeWidth:)``.
    public enum Shape: Sendable {
        case roundedRectangle(x0: Double, y0: Double, x1: Double, y1: Double, radius: Double)
        case circle(centreX: Double, centreY: Double, radius: Double)
    }

    /// Draws `shape`, antialiased, filled with `fill` and outlined with `stroke` (`none` for either).
    public func draw(_ shape: Shape, fill: String, stroke: String = "none", strokeWidth: Double = 0) throws {
        let drawing = NewDrawingWand()!
        defer { _ = DestroyDrawingWand(drawing) }
        try withColor(fill) { DrawSetFillColor(drawing, $0) }
        try withColor(stroke) { DrawSetStrokeColor(drawing, $0) }
        DrawSetStrokeWidth(drawing, strokeWidth)
        DrawSetStrokeAntialias(drawing, MagickTrue)
        switch shape {
        case .roundedRectangle(let x0, let y0, let x1, let y1, let radius):
            DrawRoundRectangle(drawing, x0, y0, x1, y1, radius, radius)
        case .circle(let cx, let cy, let radius):
            DrawCircle(drawing, cx, cy, cx, cy - radius)
        }
        try check(MagickDrawImage(pointer, drawing), .processFailed, "drawing")
    }

    // MARK: Pixels

    /// A new wand holding one image made from 8-bit pixels, row by row: 3 bytes a pixel (RGB) or
    /// 4 (RGBA, alpha not premultiplied).
    public static func fromPixels(_ pixels: [UInt8], width: Int, height: Int, hasAlpha: Bool) throws -> Wand {
        precondition(pixels.count == width * height * (hasAlpha ? 4 : 3))
        return try pixels.withUnsafeBytes { try fromPixels($0, width: width, height: height, hasAlpha: hasAlpha) }
    }

    /// A new wand holding one image made from 8-bit pixels in memory owned by the caller (copied):
    /// rows back to back, 3 bytes a pixel (RGB) or 4 (RGBA, alpha not premultiplied).
    ///
    /// Throws `too_large` beyond ImageMagick's width, height or area limit (policy.xml): ImageMagick
    /// 6's ConstituteImage asserts, ending the process, where it should fail (fuzzing found a
    /// 42x16160 PNG doing so under Debian's 16KP limit).
    public static func fromPixels(_ pixels: UnsafeRawBufferPointer, width: Int, height: Int, hasAlpha: Bool) throws -> Wand {
        try fromPixels(pixels, width: width, height: height, hasAlpha: hasAlpha, storage: CharPixel)
    }

    /// A new wand holding one image made from 16-bit pixels (0...65535), laid out as the 8-bit
    /// ones above: rows back to back, RGB or RGBA (alpha not premultiplied). Limits as above.
    public static func fromPixels(_ pixels: [UInt16], width: Int, height: Int, hasAlpha: Bool) throws -> Wand {
        precondition(pixels.count == width * height * (hasAlpha ? 4 : 3))
        return try pixels.withUnsafeBytes { try fromPixels($0, width: width, height: height, hasAlpha: hasAlpha, storage: ShortPixel) }
    }

    private static func fromPixels(_ pixels: UnsafeRawBufferPointer, width: Int, height: Int, hasAlpha: Bool, storage: StorageType) throws -> Wand {
        let sampleBytes = storage == ShortPixel ? 2 : 1
        precondition(pixels.count >= width * height * (hasAlpha ? 4 : 3) * sampleBytes)
        let limits = (Magick.resourceLimit(WidthResource), Magick.resourceLimit(HeightResource), Magick.resourceLimit(AreaResource))
        guard UInt64(width) <= limits.0, UInt64(height) <= limits.1, UInt64(width) * UInt64(height) <= limits.2 else {
            throw PipelineError(.tooLarge, "\(width)x\(height) is over ImageMagick's limits in policy.xml "
                + "(width \(limits.0), height \(limits.1), area \(limits.2) pixels)")
        }
        let wand = Wand()
        let status = MagickConstituteImage(wand.pointer, width, height, hasAlpha ? "RGBA" : "RGB", storage, pixels.baseAddress)
        try wand.check(status, .decodeFailed, "making an image from pixels")
        return wand
    }

    /// An image property such as `exif:Model` (ImageMagick parses the EXIF profile into `exif:*`
    /// properties when one is asked for), or `nil`.
    public func property(_ name: String) -> String? {
        guard let value = MagickGetImageProperty(pointer, name) else { return nil }
        defer { _ = MagickRelinquishMemory(value) }
        return String(cString: value)
    }

    /// The names of the image's properties matching `pattern` (such as `exif:GPS*`).
    public func propertyNames(_ pattern: String) -> [String] {
        var count = 0
        guard let names = MagickGetImageProperties(pointer, pattern, &count) else { return [] }
        // The array and every name in it are copies the caller frees (each leaked name, left
        // among the encoders' freed buffers, kept glibc from reusing them: 770 bytes of RSS an item).
        defer {
            for index in 0..<count { if let name = names[index] { _ = MagickRelinquishMemory(name) } }
            _ = MagickRelinquishMemory(names)
        }
        return (0..<count).compactMap { names[$0].map { String(cString: $0) } }
    }

    /// Row `y` as 16-bit samples in the order of `channels` (`RGB`, `RGBA`) into `buffer`, which
    /// holds at least `width * channels.count` samples.
    public func exportRow(_ y: Int, channels: String, into buffer: inout [UInt16]) throws {
        precondition(buffer.count >= width * channels.count)
        let w = width
        let status = buffer.withUnsafeMutableBytes { MagickExportImagePixels(pointer, 0, y, w, 1, channels, ShortPixel, $0.baseAddress) }
        try check(status, .processFailed, "reading pixels")
    }

    /// Makes the image `width` x `height` with `pixels` (16-bit samples in the order of
    /// `channels`, rows back to back), keeping everything else it carries: profiles, properties,
    /// orientation, the page scaled as a resize scales it.
    public func replacePixels(width: Int, height: Int, channels: String, pixels: [UInt16]) throws {
        precondition(pixels.count >= width * height * channels.count)
        // A clone of the image at the new size carries everything but the pixels (ImageMagick's
        // own resize starts from the same clone); the given pixels fill it, and it replaces the
        // wand's image. Point-sampling into the new size instead cost as much as the resampling.
        guard let image = GetImageFromMagickWand(pointer) else { throw PipelineError(.processFailed, "resize: no image") }
        let exception = AcquireExceptionInfo()
        defer { _ = DestroyExceptionInfo(exception) }
        guard let resized = CloneImage(image, width, height, MagickTrue, exception) else {
            let reason = exception?.pointee.reason.map { String(cString: $0) } ?? "out of memory"
            throw PipelineError(.processFailed, "resize: could not make a \(width)x\(height) image: \(reason)")
        }
        defer { _ = DestroyImage(resized) }
        guard SetImageStorageClass(resized, DirectClass) != MagickFalse else {
            throw PipelineError(.processFailed, "resize: could not allocate \(width)x\(height) pixels")
        }
        // ImageMagick 6 keeps an opacity sample for every pixel, alpha channel or not, and
        // importing samples without 'A' leaves it as the new, uninitialised pixel memory held:
        // recycled memory made opaque pixels read as transparent (exported as RGBA, or once an
        // alpha channel is activated). Reset them first; a cheap pass over the small target.
        if !channels.contains("A"), ResetImagePixels(resized, exception) == MagickFalse {
            throw PipelineError(.processFailed, "resize: could not initialise \(width)x\(height) pixels")
        }
        let imported = pixels.withUnsafeBytes { ImportImagePixels(resized, 0, 0, width, height, channels, ShortPixel, $0.baseAddress) }
        guard imported != MagickFalse else { throw PipelineError(.processFailed, "resize: writing pixels failed") }
        guard let holder = NewMagickWandFromImage(resized) else { throw PipelineError(.processFailed, "resize: out of memory") }
        defer { _ = DestroyMagickWand(holder) }
        let status = MagickSetImage(pointer, holder)
        try check(status, .processFailed, "writing pixels")
    }

    /// The pixels as 8-bit RGB, row by row (3 bytes per pixel).
    public func rgbBytes() throws -> [UInt8] { try bytes(channels: "RGB") }

    /// The pixels as 8-bit RGBA, row by row (4 bytes per pixel; alpha 255 where there is none).
    public func rgbaBytes() throws -> [UInt8] { try bytes(channels: "RGBA") }

    /// The pixels as 8-bit samples in the order of `channels` (`RGB`, `RGBA`...), row by row.
    public func bytes(channels: String) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: width * height * channels.count)
        let w = width, h = height
        let status = bytes.withUnsafeMutableBytes { MagickExportImagePixels(pointer, 0, 0, w, h, channels, CharPixel, $0.baseAddress) }
        try check(status, .processFailed, "reading pixels")
        return bytes
    }


    /// The peak signal-to-noise ratio of this image against `reference` (same size), in dB over
    /// every channel; `.infinity` when they are identical. Higher is closer: 40 dB and above is
    /// hard to tell apart by eye, 30 dB is visibly different.
    public func psnr(against reference: Wand) throws -> Double {
        guard width == reference.width, height == reference.height else {
            throw PipelineError(.processFailed, "PSNR of \(width)x\(height) against \(reference.width)x\(reference.height)")
        }
        var distortion = 0.0
        guard let difference = MagickCompareImages(pointer, reference.pointer, PeakSignalToNoiseRatioMetric, &distortion) else {
            throw PipelineError(.processFailed, lastError("comparing images"))
        }
        DestroyMagickWand(difference)
        return distortion
    }

    // MARK: Profiles and colour

    /// ImageMagick's name for the colour space (`sRGB`, `Gray`, `CMYK`, ...).
    public var colorspaceName: String {
        guard let text = CommandOptionToMnemonic(MagickColorspaceOptions, Int(colorspace.rawValue)) else { return "unknown" }
        return String(cString: text)
    }

    /// The image's ICC profile, or `nil`.
    public var iccProfile: Data? {
        var length = 0
        guard let bytes = MagickGetImageProfile(pointer, "icc", &length) else { return nil }
        defer { _ = MagickRelinquishMemory(bytes) }
        return length > 0 ? Data(bytes: bytes, count: length) : nil
    }

    /// Embeds `profile` as the ICC profile without converting pixels.
    public func setICCProfile(_ profile: Data) throws {
        let status = profile.withUnsafeBytes { MagickSetImageProfile(pointer, "icc", $0.baseAddress, $0.count) }
        try check(status, .processFailed, "setting the ICC profile")
    }

    /// Removes the ICC profile, if any, without converting pixels.
    public func removeICCProfile() {
        var length = 0
        if let old = MagickRemoveImageProfile(pointer, "icc", &length) { _ = MagickRelinquishMemory(old) }
    }

    /// Converts the pixels from the embedded profile to `profile` (with lcms), which is embedded.
    public func convert(toProfile profile: Data) throws {
        let status = profile.withUnsafeBytes { MagickProfileImage(pointer, "icc", $0.baseAddress, $0.count) }
        try check(status, .decodeFailed, "ICC colour conversion")
    }

    /// Removes metadata; keeps the ICC profile when `keepICC` is true. Also removes every
    /// property (`exif:*` parsed from the source, comments, labels), which some coders (PNG) would
    /// otherwise write back as text.
    public func strip(keepICC: Bool) throws {
        let icc = keepICC ? iccProfile : nil
        try strip()
        for name in propertyNames("*") { _ = MagickDeleteImageProperty(pointer, name) }
        if let icc { try setICCProfile(icc) }
    }

    /// Reduces to at most `colors` colours (for palette PNG and GIF), with Floyd-Steinberg dithering.
    public func quantize(colors: Int, dither: Bool = true) throws {
        try check(MagickQuantizeImage(pointer, colors, sRGBColorspace, 0, dither ? MagickTrue : MagickFalse, MagickFalse),
                  .encodeFailed, "palette reduction")
    }

    // MARK: Frames

    /// Composes every frame of an animation onto the full canvas, so each can be processed alone.
    public func coalesced() throws -> Wand {
        guard let result = MagickCoalesceImages(pointer) else {
            throw PipelineError(.decodeFailed, lastError("coalescing frames failed"))
        }
        return Wand(taking: result)
    }

    /// How long each frame shows, in milliseconds: ImageMagick's delay in its ticks per second. A
    /// delay of 10 ms or less shows for 100 ms, as browsers show such GIF frames.
    public var frameDurations: [Int] {
        defer { _ = MagickSetIteratorIndex(pointer, 0) }
        return (0..<max(1, frameCount)).map { index in
            _ = MagickSetIteratorIndex(pointer, index)
            let ticks = max(1, Int(MagickGetImageTicksPerSecond(pointer)))
            let milliseconds = Int(MagickGetImageDelay(pointer)) * 1000 / ticks
            return milliseconds <= 10 ? 100 : milliseconds
        }
    }

    /// Sets each frame's delay to `milliseconds` (in 1/1000 s ticks), the last value for any
    /// frames beyond the list.
    public func setFrameDurations(_ milliseconds: [Int]) {
        defer { _ = MagickSetIteratorIndex(pointer, 0) }
        guard let last = milliseconds.last else { return }
        for index in 0..<max(1, frameCount) {
            _ = MagickSetIteratorIndex(pointer, index)
            _ = MagickSetImageTicksPerSecond(pointer, 1000)
            _ = MagickSetImageDelay(pointer, index < milliseconds.count ? milliseconds[index] : last)
        }
    }

    /// How many times the animation plays, as ImageMagick reads it (GIF's NETSCAPE loop count,
    /// WebP's loop count): 0 is forever.
    public var iterations: Int { Int(MagickGetImageIterations(pointer)) }

    /// Each frame as a wand of its own.
    public func frames() -> [Wand] {
        (0..<frameCount).compactMap { index in
            _ = MagickSetIteratorIndex(pointer, index)
            return MagickGetImage(pointer).map { Wand(taking: $0) }
        }
    }

    /// One wand holding `frames` in order, each with its canvas reset to its own size.
    public static func joining(_ frames: [Wand]) throws -> Wand {
        let joined = Wand()
        for frame in frames {
            frame.resetPage()
            try joined.check(MagickAddImage(joined.pointer, frame.pointer), .processFailed, "joining frames")
        }
        MagickResetIterator(joined.pointer)
        return joined
    }

    /// Progressive (interlaced) or not, for the next write; set either way, because a progressive
    /// source would otherwise make a progressive output.
    public func setProgressive(_ progressive: Bool) {
        let scheme = progressive ? PlaneInterlace : NoInterlace
        _ = MagickSetInterlaceScheme(pointer, scheme)
        _ = MagickSetImageInterlaceScheme(pointer, scheme)
    }
}

/// The effects behind the `magick` processor's vetted list: pixel operations only.
extension Wand {
    public func charcoal(radius: Double, sigma: Double) throws {
        try check(MagickCharcoalImage(pointer, radius, sigma), .processFailed, "charcoal")
    }
    public func oilPaint(radius: Double) throws {
        try check(MagickOilPaintImage(pointer, radius), .processFailed, "oil_paint")
    }
    public func posterize(levels: Int, dither: Bool) throws {
        try check(MagickPosterizeImage(pointer, levels, dither ? MagickTrue : MagickFalse), .processFailed, "posterize")
    }
    public func vignette(radius: Double, sigma: Double, x: Int, y: Int) throws {
        try check(MagickVignetteImage(pointer, radius, sigma, x, y), .processFailed, "vignette")
    }
    public func swirl(degrees: Double) throws {
        try check(MagickSwirlImage(pointer, degrees), .processFailed, "swirl")
    }
    public func emboss(radius: Double, sigma: Double) throws {
        try check(MagickEmbossImage(pointer, radius, sigma), .processFailed, "emboss")
    }
    public func implode(amount: Double) throws {
        try check(MagickImplodeImage(pointer, amount), .processFailed, "implode")
    }
    /// `threshold` is a fraction (0...1) of the range.
    public func solarize(threshold: Double) throws {
        try check(MagickSolarizeImage(pointer, threshold * magickQuantumRange), .processFailed, "solarize")
    }
    public func sketch(radius: Double, sigma: Double, angle: Double) throws {
        try check(MagickSketchImage(pointer, radius, sigma, angle), .processFailed, "sketch")
    }
    public func edge(radius: Double) throws {
        try check(MagickEdgeImage(pointer, radius), .processFailed, "edge")
    }
    public func wave(amplitude: Double, wavelength: Double) throws {
        try check(MagickWaveImage(pointer, amplitude, wavelength), .processFailed, "wave")
        resetPage()
    }
    public func gamma(_ value: Double) throws {
        try check(MagickGammaImage(pointer, value), .processFailed, "gamma")
    }
    public func normalize() throws { try check(MagickNormalizeImage(pointer), .processFailed, "normalize") }
    public func equalize() throws { try check(MagickEqualizeImage(pointer), .processFailed, "equalize") }
    public func autoLevel() throws { try check(MagickAutoLevelImage(pointer), .processFailed, "auto_level") }
    public func autoGamma() throws { try check(MagickAutoGammaImage(pointer), .processFailed, "auto_gamma") }
    public func despeckle() throws { try check(MagickDespeckleImage(pointer), .processFailed, "despeckle") }
    public func enhance() throws { try check(MagickEnhanceImage(pointer), .processFailed, "enhance") }
}

extension Wand {
    /// Runs `body` with each frame in turn as the current image (operations act on the current
    /// image), then makes the first frame current again.
    public func eachFrame(_ body: (Wand) throws -> Void) throws {
        let count = max(1, frameCount)
        for index in 0..<count {
            _ = MagickSetIteratorIndex(pointer, index)
            try body(self)
        }
        _ = MagickSetIteratorIndex(pointer, 0)
    }
}
