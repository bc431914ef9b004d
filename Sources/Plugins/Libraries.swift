import CCurl
import CGIF
import CHeif
import CJPEG
import CPNG
import CTIFF
import CWebP
import PipelineKit

extension BuiltIns {
    /// The C libraries the built-in plugins run with. Each version is asked of the loaded library
    /// where it has a call for it (libcurl, libwebp, libpng, libtiff, and libheif, which is opened
    /// here as on the first HEIC or AVIF file); libjpeg-turbo and giflib have none, so theirs is the
    /// version of the headers the binary was built against.
    public static var libraries: [LibraryVersion] {
        [
            LibraryVersion(name: "libcurl", version: curlVersion),
            LibraryVersion(name: "libjpeg-turbo", version: Self.dotted(Int(LIBJPEG_TURBO_VERSION_NUMBER), base: 1000) + " (built with)"),
            LibraryVersion(name: "libpng", version: String(cString: png_get_libpng_ver(nil))),
            LibraryVersion(name: "libwebp", version: Self.dotted(Int(WebPGetDecoderVersion()), base: 256)),
            LibraryVersion(name: "libtiff", version: tiffVersion),
            LibraryVersion(name: "giflib", version: "\(GIFLIB_MAJOR).\(GIFLIB_MINOR).\(GIFLIB_RELEASE) (built with)"),
            LibraryVersion(name: "libheif", version: pk_heif_load() == 1 ? String(cString: pk_heif_get_version()) : String(cString: pk_heif_load_error())),
        ]
    }

    /// `2001005` with base 1000 is `2.1.5`; `0x010204` with base 256 is `1.2.4`.
    static func dotted(_ number: Int, base: Int) -> String {
        "\(number / (base * base)).\(number / base % base).\(number % base)"
    }

    /// libcurl's version and the TLS library it uses: `7.88.1 (OpenSSL/3.0.17)`.
    static var curlVersion: String {
        guard let info = pk_curl_version_info() else { return "unknown" }
        let version = String(cString: info.pointee.version)
        guard let ssl = info.pointee.ssl_version else { return version }
        return "\(version) (\(String(cString: ssl)))"
    }

    /// libtiff's own line, `LIBTIFF, Version 4.5.0` and a copyright, reduced to `4.5.0`.
    static var tiffVersion: String {
        guard let text = TIFFGetVersion().map({ String(cString: $0) }) else { return "unknown" }
        let firstLine = text.split(separator: "\n").first.map(String.init) ?? text
        return firstLine.components(separatedBy: "Version ").last ?? firstLine
    }
}
