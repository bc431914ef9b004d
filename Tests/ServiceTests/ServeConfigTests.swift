import Foundation
@testable import PipelineKit
import Plugins
import Testing

/// `params:` and `serve:` in pipeline files, requests' targets and signing keys: every bad input
/// gets its message, at its place.
@Suite struct ServeConfigTests {
    let registry = BuiltIns.registry()

    func parse(_ params: String, serve: String = "") -> (Pipeline?, [String]) {
        let text = """
            version: 1
            name: p
            processors:
              - resize: { width: 256, height: 256 }
            variants:
              small: { encoder: jpeg }
              large: { processors: [ { sharpen: {} } ], encoder: webp }
            \(params)
            \(serve)
            """
        let (pipeline, found) = PipelineFile.parse(text: text, file: "p.yaml", registry: registry)
        return (pipeline, found.map(\.description))
    }

    /// Base64url as signatures and `b64:` sources use it: every length, with or without padding,
    /// and nothing but its alphabet.
    @Test func base64URLDecodesWhatItEncodesAndRefusesOtherText() throws {
        var generator = SystemRandomNumberGenerator()
        for length in 0..<40 {
            let bytes = Data((0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) })
            let unpadded = SigningKeys.base64URLEncode(bytes)
            #expect(!unpadded.contains("=") && !unpadded.contains("+") && !unpadded.contains("/"))
            #expect(SigningKeys.base64URLDecode(unpadded) == bytes, "length \(length): \(unpadded)")
            let padded = unpadded + String(repeating: "=", count: (4 - unpadded.count % 4) % 4)
            #expect(SigningKeys.base64URLDecode(padded) == bytes, "length \(length) padded: \(padded)")
        }
        #expect(SigningKeys.base64URLDecode("-_-_") == Data([0xFB, 0xFF, 0xBF]))
        for bad in ["ab+c", "ab/c", "ab c", "abé", "ab\ncd", "a", "ab%3D"] {
            #expect(SigningKeys.base64URLDecode(bad) == nil, "'\(bad)' was decoded")
        }
    }

    @Test func parametersAreCheckedAgainstTheStageOptionTheySet() throws {
        let (pipeline, found) = parse("""
            params:
              w: { sets: processors.0.resize.width, min: 16, max: 2048, doc: "Width" }
              q: { sets: "variants.small.encoder.jpeg.quality", max: 90 }
              s: { sets: "variants.large.processors[0].sharpen.sigma" }
            """)
        #expect(found.isEmpty, "\(found)")
        let params = try #require(pipeline?.params)
        #expect(params["w"]?.target == .processor(index: 0) && params["w"]?.option.range == 16...2048 && params["w"]?.doc == "Width")
        #expect(params["q"]?.target == .variantEncoder(variant: "small") && params["q"]?.option.range == 1...90)
        let applied = try #require(pipeline).applying(["w": "100", "q": "50"])
        #expect(applied.variants.allSatisfy { $0.processors[0].options.int("width") == 100 })
        #expect(applied.variants[0].encoder.options.int("quality") == 50)
        #expect(throws: PipelineError.self) { try pipeline!.applying(["w": "4000"]) }
        #expect(throws: PipelineError.self) { try pipeline!.applying(["zoom": "2"]) }
        #expect(throws: PipelineError.self) { try pipeline!.applying(["q": "high"]) }
        #expect(throws: PipelineError.self) { try pipeline!.restricted(toVariant: nil) }
        #expect(try pipeline!.restricted(toVariant: "large").variants.map(\.name) == ["large"])
    }

    @Test func eachWrongParameterIsNamedAtItsLine() {
        let cases: [(String, String)] = [
            ("w: { sets: processors.3.resize.width }", "p.yaml:9:14: error: params.w: processors[3]: the pipeline has 1 processors"),
            ("w: { sets: processors.0.crop.width }", "p.yaml:9:14: error: params.w: processors[0] is 'resize', not 'crop'"),
            ("w: { sets: processors.0.resize.widht }", "p.yaml:9:14: error: params.w: 'resize' has no option 'widht'; did you mean 'width'?"),
            ("w: { sets: processors.0.resize.width, min: 0 }", "min and max must lie within 'width''s own range"),
            ("w: { sets: processors.0.resize.width, values: [a] }", "values are for options of named values"),
            ("w: { sets: processors.0.resize.width, min: 100, max: 50 }", "min is above max"),
            ("w: { sets: resize.width }", "expected processors[N].PLUGIN.OPTION"),
            ("w: { sets: variants.tiny.encoder.jpeg.quality }", "no variant 'tiny'"),
            ("expires: { sets: processors.0.resize.width }", "'expires' is a query parameter the service uses itself"),
            ("v: { sets: processors.0.resize.width }", "'v' is a query parameter the service uses itself"),
            ("\"a b\": { sets: processors.0.resize.width }", "a parameter name may use letters, digits, '_' and '-' only"),
            ("w: { sets: processors.0.resize.width, maximum: 5 }", "maximum"),
        ]
        for (entry, message) in cases {
            let found = parse("params:\n  " + entry).1
            #expect(found.contains { $0.contains(message) }, "\(entry): \(found)")
        }
        #expect(parse("params: [w]").1.contains { $0.contains("expected a map from parameter names") })
    }

    @Test func serveSectionIsCheckedLikeEveryOther() {
        #expect(parse("", serve: "serve:\n  sources: \"https://a/\"").1.contains { $0.contains("sources") })
        #expect(parse("", serve: "serve:\n  cache_contol: x").1.contains { $0.contains("did you mean 'cache_control'") })
        let (pipeline, found) = parse("", serve: "serve:\n  sources: [\"https://img.example.com/\"]\n  cache_control: \"public, max-age=60\"")
        #expect(found.isEmpty)
        #expect(pipeline.map { SourceBoundary($0.servedSources) }?.refusal(for: "https://img.example.com/a.jpg") == nil)
        #expect(pipeline.map { SourceBoundary($0.servedSources) }?.refusal(for: "https://img.example.com.evil/a.jpg") != nil)
        #expect(pipeline?.serve.cacheControl == "public, max-age=60")
    }

    /// A prefix is compared by its parts and whole path segments: one without the '/' that ends
    /// a host or a directory lets in no more than it names. One that names no place is an error.
    @Test func sourcePrefixesLetInOnlyWhatTheyName() {
        let (pipeline, found) = parse("", serve: """
            serve:
              sources: ["https://img.example.com", "/srv/images", "http://127.0.0.1:", "s3://uploads/", "https://cdn.example.com/a/"]
            """)
        #expect(found.isEmpty, "\(found)")
        let boundary = pipeline.map { SourceBoundary($0.servedSources) }
        #expect(boundary?.refusal(for: "https://img.example.com.evil.example/a.jpg") != nil)
        #expect(boundary?.refusal(for: "https://img.example.com/any/path.jpg") == nil)
        #expect(boundary?.refusal(for: "/srv/images-other/a.jpg") != nil)
        #expect(boundary?.refusal(for: "https://cdn.example.com/ab/x.jpg") != nil)
        let (_, bad) = parse("", serve: "serve:\n  sources: [\"img.example.com/\", \"srv/images/\"]")
        #expect(bad.count == 2 && bad.allSatisfy { $0.contains("error: serve.sources:") && $0.contains("is not an absolute directory") }, "\(bad)")
    }

    @Test func requestTargetsAreReadWhateverTheSourceEncoding() throws {
        let variants: (String) -> Bool? = { ["p": false, "v": true][$0] }
        let plain = try ServeRequest(target: "/sig/p/https://img.example.com/a.jpg?w=10&expires=99", hasVariants: variants)
        #expect(plain.source == "https://img.example.com/a.jpg" && plain.variant == nil)
        #expect(plain.signed == "/p/https://img.example.com/a.jpg?w=10&expires=99")
        #expect(plain.parameters.map(\.name) == ["w", "expires"])
        let merged = try ServeRequest(target: "/sig/p/https:/img.example.com/a.jpg", hasVariants: variants)
        #expect(merged.source == "https://img.example.com/a.jpg")
        let encoded = try ServeRequest(target: "/sig/v/small/https%3A%2F%2Fa%2Fb.jpg%3Fx%3D1", hasVariants: variants)
        #expect(encoded.variant == "small" && encoded.source == "https://a/b.jpg?x=1")
        let b64 = try ServeRequest(target: "/sig/p/b64:" + SigningKeys.base64URLEncode(Data("s3://bucket/k?.jpg".utf8)), hasVariants: variants)
        #expect(b64.source == "s3://bucket/k?.jpg")
        let built = ServeRequest.path(pipeline: "v", variant: "small", source: "https://a/b c.jpg?x=1", parameters: ["w": "5"])
        let back = try ServeRequest(target: "/sig" + built, hasVariants: variants)
        #expect(back.source == "https://a/b c.jpg?x=1" && back.parameters.first?.value == "5")
        // A `;` stays as it is: Vapor's request URL turns `%3B` back into `;`, so a signature
        // over `%3B` would never match there.
        let data = ServeRequest.path(pipeline: "p", variant: nil, source: "data:image/png;base64,iVBO+/=", parameters: [:])
        #expect(data == "/p/data:image/png;base64%2CiVBO%2B/%3D")
        #expect(try ServeRequest(target: "/sig" + data, hasVariants: variants).source == "data:image/png;base64,iVBO+/=")
        for (target, message) in [("/sig/nope/a.jpg", "no pipeline 'nope'"), ("/sig/p/", "names no source"), ("/sig", "expected /SIGNATURE"),
                                  ("/sig/p/b64:!!", "not base64url"), ("/sig/p/a%0Ab.jpg", "line break"), ("/sig/v/a.jpg", "expected /SIGNATURE")] {
            #expect {
                try ServeRequest(target: target, hasVariants: variants)
            } throws: { ($0 as? PipelineError)?.message.contains(message) == true }
        }
    }

    @Test func signingKeysAreReadStrictlyAndRotate() throws {
        let old = "old:" + String(repeating: "0f", count: 32), new = "new:" + String(repeating: "a1", count: 32)
        let rotated = try SigningKeys(parsing: new + "," + old, origin: "env")
        let before = try SigningKeys(parsing: old, origin: "env")
        let signature = before.sign("/p/a.jpg")
        #expect(rotated.verify(signature, of: "/p/a.jpg")?.id == "old")
        #expect(rotated.verify(rotated.sign("/p/a.jpg"), of: "/p/a.jpg")?.id == "new")
        #expect(rotated.verify(signature, of: "/p/b.jpg") == nil)
        #expect(rotated.verify("not-base64!", of: "/p/a.jpg") == nil)
        for (text, message) in [("nokey", "key 1 is not ID:HEX"), ("a:xyz", "key 'a' is not hexadecimal"), ("a:abcd", "use at least 16"), ("", "no keys")] {
            #expect { try SigningKeys(parsing: text, origin: "env") } throws: { ($0 as? PipelineError)?.message.contains(message) == true }
        }
    }

    @Test func acceptChoosesAVIFThenWebPAndHonoursQZero() {
        func allowed(_ accept: String?) -> String { Pipeline.negotiatedFormat(accept: accept).description }
        #expect(allowed("image/avif,image/webp,*/*") == "jpeg+png+gif+webp+avif")
        #expect(allowed("image/avif;q=0, image/webp") == "jpeg+png+webp")
        #expect(allowed("image/*,*/*;q=0.8") == "jpeg+png+gif")
        #expect(allowed("*/*") == "jpeg+png+gif")
        #expect(allowed(nil) == "jpeg+png+gif")
        #expect(allowed("image/jpeg") == "jpeg+png")
        #expect(allowed("image/jpeg, image/png") == "jpeg+png")
        #expect(allowed("image/webp;q=0, image/jpeg") == "jpeg+png")
        #expect(allowed("image/avif") == "jpeg+png+avif")
        // JPEG XL only where the client names it (Safari 17+ does); a wildcard never counts.
        #expect(allowed("image/jxl,image/avif,image/webp,*/*") == "jpeg+png+gif+webp+avif+jxl")
        #expect(allowed("image/jxl;q=0,image/webp") == "jpeg+png+webp")
        #expect(allowed("image/*") == "jpeg+png+gif")
    }
}
