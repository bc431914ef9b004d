// The example of docs/library.md, built and exercised by `make test` (check.sh).
import Foundation
import Hummingbird
import PipelineHummingbird
import PipelineKit
import Plugins

let arguments = CommandLine.arguments
func argument(_ name: String, _ fallback: String) -> String {
    arguments.firstIndex(of: name).flatMap { arguments.indices.contains($0 + 1) ? arguments[$0 + 1] : nil } ?? fallback
}

// docs/library.md: load
// One object, made once at start-up: every pipeline file validated (all problems thrown at
// once, as `pipelinectl validate` prints them), every stage built, the built-in plugins.
var options = ImagePipelines.Options()
options.keys = try SigningKeys.load(file: nil, environment: ProcessInfo.processInfo.environment)
let images = try ImagePipelines(paths: [argument("--pipelines", "pipelines")], registry: BuiltIns.registry(), options: options)
// end

// docs/library.md: mount
var routeOptions = ImageRoutes.Options()
routeOptions.jobs = Int(argument("--jobs", "")) ?? routeOptions.jobs
routeOptions.queue = Int(argument("--queue", ""))
let routes = ImageRoutes(library: images, options: routeOptions)
let router = Router(context: ImageRequestContext.self)
router.add(middleware: routes.drainMiddleware())
routes.operations.add(to: router)            // /livez, /readyz, /metrics
routes.add(to: router, atPath: "/img")       // GET /img/SIGNATURE/PIPELINE[/VARIANT]/SOURCE

// An upload: the pipeline's outputs, stored where its `output:` says.
router.post("/upload/:pipeline") { request, context -> String in
    let pipeline = try context.parameters.require("pipeline")
    let made = try await routes.upload(request, pipeline: pipeline, maxBytes: 20 << 20)
    return made.result.outputs.joined(separator: "\n") + "\n"
}

// A signed URL for a template: what the page links to.
router.get("/link/:pipeline") { request, context -> String in
    let pipeline = try context.parameters.require("pipeline")
    let source = request.uri.queryParameters["source"].map(String.init) ?? ""
    return "/img" + (try images.signedPath(pipeline: pipeline, source: source)) + "\n"
}
// end

// docs/library.md: process
func tour(_ images: ImagePipelines, upload: Data) async throws {
    let made = try await images.process(bytes: upload, name: "cat.jpg", pipeline: "avatars")
    let avatar = made.outputs[0]       // an ImageOutput: avatar.mediaType is image/png,
    let bytes = try avatar.data()      // avatar.size 128x128, avatar.fingerprint the ETag
    print(bytes.count, avatar.mediaType, avatar.size, avatar.fingerprint)

    let small = try await images.process("https://img.example.com/a.jpg", pipeline: "responsive", variant: "small")
    let stored = try await images.process(bytes: upload, pipeline: "avatars", delivery: .store)  // by its output:
    let facts = try await images.facts("https://img.example.com/a.jpg", pipeline: "product-images")
    print(small.outputs.count, stored.result.outputs, facts["blurhash"] ?? "-")
}
// end

// docs/library.md: sign
func links(_ images: ImagePipelines) throws -> (path: String, srcset: String) {
    let path = try images.signedPath(pipeline: "thumbnails", source: "https://img.example.com/a.jpg")
    let srcset = try images.srcset(pipeline: "responsive", source: "https://img.example.com/a.jpg",
                                   base: "https://img.example.com")  // ".../small/... 320w, ... 800w, ... 1600w"
    return (path, srcset)
}
// end

// docs/library.md: serve
// The server's own limits are the app's: an idle timeout, and a watcher that lets a request's
// work stop when its client goes away.
let app = Application(
    router: router,
    server: .http1(configuration: .init(additionalChannelHandlers: [ClientCloseWatcher()], idleTimeout: .seconds(60))),
    configuration: .init(address: .hostname("127.0.0.1", port: Int(argument("--port", "8080")) ?? 8080)),
    onServerRunning: { channel in FileHandle.standardOutput.write(Data("listening on \(channel.localAddress?.port ?? 0)\n".utf8)) }
)
try await app.runService()
// end
