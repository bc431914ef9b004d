import Foundation
import CLinux
import MagickKit
import PipelineKit
@testable import Plugins
import Testing
import TestSupport

/// What MagickKit asks of ImageMagick it gives back. Counted with glibc's `mallinfo2` (bytes in
/// use on the heap), so the check is of allocations, not of time or RSS.
@Suite struct MagickMemoryTests {
    /// Bytes the heap holds in use now.
    func inUse() -> Int { Int(mallinfo2().uordblks) }

    /// `propertyNames` (which `strip` and the encoders call for every output) freed the list but not
    /// the names in it: about 190 bytes an output, left among the encoders' freed buffers so glibc
    /// could not reuse them; a 100,000-item run's RSS grew by 770 bytes an item.
    @Test func propertyNamesGivesEveryNameBack() throws {
        let wand = Wand()
        try wand.read(try Fixtures.image("plasma:", width: 16, height: 16, format: "PNG"), format: "PNG")
        #expect(wand.propertyNames("*").count >= 3)  // png:IHDR.*, date:*, ...
        for _ in 0..<1000 { _ = wand.propertyNames("*") }
        let before = inUse()
        for _ in 0..<20_000 { _ = wand.propertyNames("*") }
        let grown = inUse() - before
        // Leaking three short names a call would be over a megabyte.
        #expect(grown < 64 * 1024, "the heap grew by \(grown) bytes over 20,000 calls")
    }
}
