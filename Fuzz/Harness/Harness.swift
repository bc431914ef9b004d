import Foundation
@testable import Plugins

// The libFuzzer harness for every parser of untrusted bytes we own (Plugins' FuzzTargets); the
// environment variable FUZZ_TARGET names the one to fuzz (sniffer, header-probe, png, jpeg, webp,
// heif, tiff, gif, svg, icc). Built and run by `make fuzz` (Fuzz/run.sh).

nonisolated(unsafe) var target: (@Sendable (Data) -> Void)?

/// SwiftPM links an executable's entry point as `<module>_main`: pick the target, then hand the
/// command line to libFuzzer.
@_cdecl("pipelinekit_fuzz_main")
public func main(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    let name = ProcessInfo.processInfo.environment["FUZZ_TARGET"] ?? ""
    guard let chosen = FuzzTargets.all[name] else {
        FileHandle.standardError.write(Data("set FUZZ_TARGET to one of: \(FuzzTargets.all.keys.sorted().joined(separator: ", "))\n".utf8))
        return 2
    }
    target = chosen
    var argc = argc
    var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { bytes, count in LLVMFuzzerTestOneInput(bytes, count) }
}

/// One input for the chosen target (libFuzzer's own main, linked in but replaced, refers to it too).
@_cdecl("LLVMFuzzerTestOneInput")
public func LLVMFuzzerTestOneInput(_ bytes: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    target?(bytes.map { Data(bytes: $0, count: count) } ?? Data())
    return 0
}

@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(_ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                         _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt) -> CInt
