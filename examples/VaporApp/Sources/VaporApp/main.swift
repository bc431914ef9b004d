// The Vapor example of docs/library.md, built and exercised by `make test` (check.sh).
import Foundation
import PipelineKit
import PipelineVapor
import Plugins
import Vapor

let arguments = CommandLine.arguments
func argument(_ name: String, _ fallback: String) -> String {
    arguments.firstIndex(of: name).flatMap { arguments.indices.contains($0 + 1) ? arguments[$0 + 1] : nil } ?? fallback
}

var options = ImagePipelines.Options()
options.keys = try SigningKeys.load(file: nil, environment: ProcessInfo.processInfo.environment)
let images = try ImagePipelines(paths: [argument("--pipelines", "pipelines")], registry: BuiltIns.registry(), options: options)

// docs/library.md: vapor
var routeOptions = ImageRouteCollection.Options()
routeOptions.jobs = Int(argument("--jobs", "")) ?? routeOptions.jobs
routeOptions.queue = Int(argument("--queue", ""))
let routes = ImageRouteCollection(library: images, atPath: "img", options: routeOptions)

let app = try await Application.make(Environment(name: "production", arguments: ["vapor-app"]))
app.http.server.configuration.hostname = "127.0.0.1"
app.http.server.configuration.port = Int(argument("--port", "8080")) ?? 8080
app.http.server.configuration.idleTimeout = .seconds(60)   // the server's limits are the app's
app.middleware.use(ImageRouteCollection.problems)          // problem+json for upload errors
try app.register(collection: routes)                       // GET /img/SIGNATURE/PIPELINE[/VARIANT]/SOURCE
try app.register(collection: routes.operations)            // /livez, /readyz, /metrics

// A multipart upload (the image in the part named "file"): the pipeline's outputs, stored
// where its `output:` says. `body: .stream` leaves the body to upload(), which reads at most
// maxBytes of it.
app.on(.POST, "upload", ":pipeline", body: .stream) { request -> String in
    let pipeline = try request.parameters.require("pipeline")
    let made = try await routes.upload(request, pipeline: pipeline, maxBytes: 20 << 20)
    return made.result.outputs.joined(separator: "\n") + "\n"
}

// A signed URL for a template: what the page links to.
app.get("link", ":pipeline") { request -> String in
    let pipeline = try request.parameters.require("pipeline")
    let source = (try? request.query.get(String.self, at: "source")) ?? ""
    return "/img" + (try images.signedPath(pipeline: pipeline, source: source)) + "\n"
}
// end

try await app.startup()
FileHandle.standardOutput.write(Data("listening on \(app.http.server.shared.localAddress?.port ?? 0)\n".utf8))
try await app.running?.onStop.get()
try await app.asyncShutdown()
