import Foundation
import PipelineKit

/// Block averages of 8-bit rows as they arrive, for the reduce-on-load paths: `factor` x `factor`
/// pixels become one, so the full-size image never exists in memory. With alpha, colour is
/// averaged premultiplied by alpha (then divided by the alpha total), so transparent pixels do not
/// bleed their hidden colour into the edges. Each row is first added into per-column totals
/// (contiguous, so the compiler vectorises it); the columns of a block are summed once per
/// `factor` rows.
struct BoxReducer {
    let width: Int, height: Int, factor: Int, alpha: Bool
    /// The rows come premultiplied by alpha already (libtiff's RGBA interface): averaged as they
    /// are, then divided by the alpha.
    var premultiplied = false

    /// The block size for reducing `size` when it may shrink `shrink` times in all and `headroom`
    /// times must be left for the resize filter: the largest in 2...(shrink / headroom) whose
    /// partial last block moves the far edge by at most a twentieth of an output pixel, else the
    /// one that moves it least if that is within a tenth; `nil` when none is (the image is then
    /// decoded whole: a 1200x675 GIF in blocks of 2, fitted to 256, moved the bottom edge by 0.21
    /// of a pixel, 45.6 dB against 52.3 for a full decode) or no block of 2 fits.
    ///
    /// A partial block makes a pixel that covers less than the others, and the resize treats every
    /// pixel alike: the picture is stretched by the missing fraction. 3840 pixels in blocks of 7
    /// are 548.57 blocks made into 549 pixels; fitted to 256 that moves edges by 0.2 of an output
    /// pixel, 39 dB against a full decode on a wallpaper of sharp curves; blocks of 6 divide 3840
    /// (and 2160) exactly.
    static func blockSize(for size: PixelSize, shrink: Double, headroom: Int) -> Int? {
        let limit = Int(shrink / Double(headroom))
        guard limit >= 2 else { return nil }
        func shift(_ k: Int) -> Double { edgeShift(size, block: k, shrink: shrink) }
        let candidates = Array((2...limit).reversed())
        if let exact = candidates.first(where: { shift($0) <= 0.05 }) { return exact }
        return candidates.filter { shift($0) <= 0.1 }.min { shift($0) < shift($1) }
    }
    /// How far blocks of `block` move the far edge of `size` shrunk `shrink` times in all, in output
    /// pixels: the missing part of a partial last block (source pixels) over the source pixels an
    /// output pixel covers.
    static func edgeShift(_ size: PixelSize, block k: Int, shrink: Double) -> Double {
        Double(max((size.width + k - 1) / k * k - size.width, (size.height + k - 1) / k * k - size.height)) / shrink
    }

    var outWidth: Int { (width + factor - 1) / factor }
    var outHeight: Int { (height + factor - 1) / factor }

    /// The reduced pixels (RGBA or RGB) in `Sample`s (see ``Accumulator``), reading each of the
    /// `height` rows with `readRow`, which fills the buffer it is given (`width` x 4 or 3 bytes).
    func reduce<Sample: FixedWidthInteger & UnsignedInteger>(as _: Sample.Type = UInt8.self,
                                                             _ readRow: (inout [UInt8]) throws -> Void) throws -> [Sample] {
        var row = [UInt8](repeating: 0, count: width * (alpha ? 4 : 3))
        return try reduce(as: Sample.self, feeding: { _, take in
            try readRow(&row)
            row.withUnsafeBufferPointer(take)
        })
    }

    /// The same, with rows handed over where they already are: `feed(y, take)` calls `take` once
    /// with row `y` (`width` x 4 or 3 bytes), which adds it in place (no copy).
    func reduce<Sample: FixedWidthInteger & UnsignedInteger>(as _: Sample.Type = UInt8.self,
                                                             feeding feed: (Int, (UnsafeBufferPointer<UInt8>) -> Void) throws -> Void) throws -> [Sample] {
        var accumulator = Accumulator<Sample>(self)
        for y in 0..<height {
            try feed(y) { row in accumulator.add(row) }
        }
        return accumulator.pixels
    }

    /// The block averages of RGB `pixels` already in memory (`width` x 3 bytes a row), their
    /// output rows cut into `parts` that the pool's idle threads share (``WorkerPool/shareIdleThreads(parts:_:)``):
    /// the same bytes as ``reduce(feeding:)``, since every part but the last starts and ends on a
    /// block boundary.
    func reduceInParts(_ pixels: [UInt8], parts: Int = 4) -> [UInt8] {
        precondition(!alpha && pixels.count == width * height * 3)
        let outRows = outHeight, rowBytes = width * 3, outRowBytes = outWidth * 3, factor = self.factor, height = self.height
        let parts = max(1, min(parts, outRows))
        return [UInt8](unsafeUninitializedCapacity: outRows * outRowBytes) { out, count in
            pixels.withUnsafeBufferPointer { source in
                let shared = Shared(source: source.baseAddress!, out: out.baseAddress!)
                WorkerPool.shareIdleThreads(parts: parts) { part in
                    let first = outRows * part / parts, last = outRows * (part + 1) / parts
                    let y0 = first * factor, y1 = min(height, last * factor)
                    var accumulator = Accumulator<UInt8>(BoxReducer(width: rowBytes / 3, height: y1 - y0, factor: factor, alpha: false))
                    for y in y0..<y1 { accumulator.add(UnsafeBufferPointer(start: shared.source + y * rowBytes, count: rowBytes)) }
                    accumulator.pixels.withUnsafeBufferPointer {
                        (shared.out + first * outRowBytes).update(from: $0.baseAddress!, count: $0.count)
                    }
                }
            }
            count = outRows * outRowBytes
        }
    }

    /// The rows a part reads and the output it writes: each part its own rows.
    private struct Shared: @unchecked Sendable {
        let source: UnsafePointer<UInt8>, out: UnsafeMutablePointer<UInt8>
    }

    /// The block averages of rows pushed one at a time, in order (for readers that hand rows out
    /// rather than being asked for them): after all `height` rows, ``pixels`` is what
    /// ``reduce(feeding:)`` gives.
    ///
    /// `Sample` is the reduced pixels' sample: `UInt8`, or `UInt16` to keep the fraction an
    /// average has (a block of 2 x 2 has quarter steps). Rounded to 8 bits, a smooth gradient
    /// reduced and then resized carries the rounding as bands that the resize cannot average
    /// away: a 5120x2880 wallpaper in blocks of 2 fitted to 512 read 58.0 dB against a full
    /// decode's Lanczos, 58.9 kept in 16 bits.
    struct Accumulator<Sample: FixedWidthInteger & UnsignedInteger> {
        let box: BoxReducer
        /// The reduced pixels (RGBA or RGB), complete once every row has been added.
        private(set) var pixels: [Sample]
        // A column total is at most factor x 255 x 255: far from UInt32's limit for any factor.
        private var columns: [UInt32]
        private var rows = 0, outY = 0, y = 0

        init(_ box: BoxReducer) {
            self.box = box
            let channels = box.alpha ? 4 : 3
            columns = [UInt32](repeating: 0, count: box.width * channels)
            pixels = [Sample](repeating: 0, count: box.outWidth * box.outHeight * channels)
        }

        /// Adds the next row (`width` x 4 or 3 bytes).
        mutating func add(_ row: UnsafeBufferPointer<UInt8>) {
            let alpha = box.alpha, premultiplied = box.premultiplied
            columns.withUnsafeMutableBufferPointer { columns in
                if alpha, !premultiplied { BoxReducer.addPremultiplied(row, to: columns) } else { BoxReducer.add(row, to: columns) }
            }
            advance()
        }

        /// Adds a row of zeros (black and transparent) without reading one: a damaged file's rows
        /// that never came.
        mutating func addEmptyRow() { advance() }

        /// Counts the row just added; makes an output row after every `factor` rows and the last.
        private mutating func advance() {
            rows += 1
            y += 1
            guard rows == box.factor || y == box.height else { return }
            emit()
            rows = 0
            outY += 1
        }

        /// Turns the column totals of the rows added since the last output row into one.
        private mutating func emit() {
            let channels = box.alpha ? 4 : 3, factor = box.factor, width = box.width
            let outW = box.outWidth, rows = self.rows, outY = self.outY
            let alpha = box.alpha, premultiplied = box.premultiplied
            // 8-bit values to the sample's range: 255 is UInt16's 65535 at 257 times.
            let top = UInt64(Sample.max), scale = top / 255
            // Every whole block of the row has the same pixel count: divided by a multiply (three
            // divisions a pixel were a third of a large PNG's reduction in a profile).
            let whole = Divisor(UInt64(rows * factor))
            columns.withUnsafeMutableBufferPointer { columns in
                pixels.withUnsafeMutableBufferPointer { out in
                    // Without alpha, the whole blocks in a tight loop of their own (a block's
                    // totals are under 2^32 for any block under 4000 pixels wide).
                    let wholeBlocks = alpha ? 0 : width / factor
                    if wholeBlocks > 0 {
                        let c = columns.baseAddress!, o = out.baseAddress! + outY * outW * 3
                        let half = UInt64(rows * factor / 2)
                        for ox in 0..<wholeBlocks {
                            var r: UInt32 = 0, g: UInt32 = 0, b: UInt32 = 0
                            var i = ox * factor * 3
                            for _ in 0..<factor {
                                r &+= c[i]; g &+= c[i + 1]; b &+= c[i + 2]
                                i += 3
                            }
                            o[ox * 3] = Sample(truncatingIfNeeded: whole.divide(UInt64(r) * scale + half))
                            o[ox * 3 + 1] = Sample(truncatingIfNeeded: whole.divide(UInt64(g) * scale + half))
                            o[ox * 3 + 2] = Sample(truncatingIfNeeded: whole.divide(UInt64(b) * scale + half))
                        }
                    }
                    for ox in wholeBlocks..<outW {
                        let x0 = ox * factor, x1 = min(width, x0 + factor)
                        var r: UInt64 = 0, g: UInt64 = 0, b: UInt64 = 0, a: UInt64 = 0
                        for x in x0..<x1 {
                            let i = x * channels
                            r &+= UInt64(columns[i]); g &+= UInt64(columns[i + 1]); b &+= UInt64(columns[i + 2])
                            if alpha { a &+= UInt64(columns[i + 3]) }
                        }
                        let count = UInt64(rows * (x1 - x0)), o = (outY * outW + ox) * channels
                        let byCount = x1 - x0 == factor ? whole : Divisor(count)
                        if alpha, premultiplied {
                            out[o] = a == 0 ? 0 : Sample(min(top, (r * 255 * scale + a / 2) / a))
                            out[o + 1] = a == 0 ? 0 : Sample(min(top, (g * 255 * scale + a / 2) / a))
                            out[o + 2] = a == 0 ? 0 : Sample(min(top, (b * 255 * scale + a / 2) / a))
                            out[o + 3] = Sample(byCount.divide(a * scale + count / 2))
                        } else if alpha {
                            out[o] = a == 0 ? 0 : Sample((r * scale + a / 2) / a)
                            out[o + 1] = a == 0 ? 0 : Sample((g * scale + a / 2) / a)
                            out[o + 2] = a == 0 ? 0 : Sample((b * scale + a / 2) / a)
                            out[o + 3] = Sample(byCount.divide(a * scale + count / 2))
                        } else {
                            out[o] = Sample(byCount.divide(r * scale + count / 2))
                            out[o + 1] = Sample(byCount.divide(g * scale + count / 2))
                            out[o + 2] = Sample(byCount.divide(b * scale + count / 2))
                        }
                    }
                }
                columns.update(repeating: 0)
            }
        }
    }

    /// Division by one divisor as a multiply: `x / d`, exactly, while `x` times `d` is under 2^64
    /// (a block's total scaled to 16 bits is under 65536 d, so any block under 4096 pixels wide).
    /// The quotient is the high half of `x` times m = ceil(2^64 / d): x m / 2^64 is x/d plus
    /// x (m d - 2^64) / (d 2^64), which is under x / 2^64 (m d - 2^64 < d) and so under 1/d; x/d
    /// is at least 1/d short of the next whole number, so the floor is x/d's.
    struct Divisor {
        let d: UInt64, m: UInt64
        init(_ d: UInt64) {
            precondition(d > 0)
            self.d = d
            m = d == 1 ? 0 : UInt64.max / d + 1
        }
        @inline(__always)
        func divide(_ x: UInt64) -> UInt64 { d == 1 ? x : x.multipliedFullWidth(by: m).high }
    }

    /// Adds a row's channel values into the column totals.
    @inline(__always)
    static func add(_ row: UnsafeBufferPointer<UInt8>, to columns: UnsafeMutableBufferPointer<UInt32>) {
        for i in 0..<row.count { columns[i] &+= UInt32(row[i]) }
    }

    /// Adds an RGBA row into the column totals, colour premultiplied by alpha.
    @inline(__always)
    static func addPremultiplied(_ row: UnsafeBufferPointer<UInt8>, to columns: UnsafeMutableBufferPointer<UInt32>) {
        for i in stride(from: 0, to: row.count, by: 4) {
            let alpha = UInt32(row[i + 3])
            columns[i] &+= UInt32(row[i]) &* alpha
            columns[i + 1] &+= UInt32(row[i + 1]) &* alpha
            columns[i + 2] &+= UInt32(row[i + 2]) &* alpha
            columns[i + 3] &+= alpha
        }
    }
}
