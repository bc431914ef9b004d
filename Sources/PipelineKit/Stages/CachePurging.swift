import Foundation

/// What `pipelinectl cache purge` asks a CDN to drop: the sources, their cache tags (as the
/// service tags its answers, ``CacheTags``), and the paths of their answers that can be named
/// (the signed URLs of each variant at each declared width, under the routes' mount path).
public struct PurgeRequest: Sendable, Equatable {
    /// The sources as requested.
    public var sources: [String]
    /// The source tags of ``sources`` (`pk-s-…`), in the same order.
    public var tags: [String]
    /// Paths of answers (`/SIGNATURE/PIPELINE[/VARIANT]/SOURCE[?w=…]`), from the service's root;
    /// empty when no signing key was given.
    public var paths: [String]

    public init(sources: [String], tags: [String], paths: [String]) {
        self.sources = sources
        self.tags = tags
        self.paths = paths
    }
}

/// A CDN or cache in front of `pipelinectl serve` that can drop answers on request (the
/// `purge:` list of a pipeline file): Varnish, CloudFront, Cloudflare, Fastly, or a team's own.
///
/// A purger is built only by `cache purge` (and `work`, when a re-upload purges what it
/// replaces); validation runs its plugin's `check`, so no credentials are needed to validate.
public protocol CachePurging: Sendable {
    /// Asks the CDN to drop what `request` names. Returns one line for people saying what was
    /// asked (`xkey purge of 2 tags: 5 objects`); throws a ``PipelineError`` naming the purger and
    /// the CDN's status when the CDN refuses or cannot be reached.
    func purge(_ request: PurgeRequest) async throws -> String
}
