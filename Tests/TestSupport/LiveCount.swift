import Synchronization

/// Counts live tokens: a test captures a token in a closure and checks, once the code under test
/// is done with the closure, that the token (and so the closure) was released.
public final class LiveCount: Sendable {
    private let alive = Atomic<Int>(0)

    public init() {}

    /// Tokens made by ``token()`` and not yet released.
    public var value: Int { alive.load(ordering: .sequentiallyConsistent) }

    /// A new live token.
    public func token() -> Token { Token(self) }

    public final class Token: Sendable {
        private let owner: LiveCount
        init(_ owner: LiveCount) {
            self.owner = owner
            owner.alive.add(1, ordering: .sequentiallyConsistent)
        }
        deinit { owner.alive.subtract(1, ordering: .sequentiallyConsistent) }
    }
}
