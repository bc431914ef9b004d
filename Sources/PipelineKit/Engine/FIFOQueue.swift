/// A first-in, first-out queue with O(1) amortised push and pop (an array with a moving head,
/// compacted once the consumed half dominates). Not thread-safe: callers hold their own lock.
struct FIFOQueue<Element>: ~Copyable {
    private var storage: [Element] = []
    private var head = 0

    var isEmpty: Bool { head >= storage.count }

    mutating func push(_ element: Element) { storage.append(element) }

    mutating func popFirst() -> Element? {
        guard head < storage.count else { return nil }
        let element = storage[head]
        head += 1
        if head >= 64, head * 2 >= storage.count {
            storage.removeFirst(head)
            head = 0
        }
        return element
    }

    mutating func popLast() -> Element? {
        guard head < storage.count else { return nil }
        return storage.removeLast()
    }
}
