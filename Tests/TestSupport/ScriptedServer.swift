import Foundation
import Synchronization

/// A raw HTTP/1.1 server on 127.0.0.1 for faults a well-behaved server library cannot produce:
/// bodies that drip, lie about their length, or stop with a reset. Each connection runs `script`
/// on its own thread with the request's head; the script writes whatever bytes it likes.
public final class ScriptedServer: Sendable {
    /// One accepted connection.
    public struct Connection: Sendable {
        let fd: Int32
        /// Writes raw bytes; returns false once the peer has gone.
        @discardableResult
        public func write(_ data: Data) -> Bool {
            data.withUnsafeBytes { buffer in
                var offset = 0
                while offset < buffer.count {
                    let n = send(fd, buffer.baseAddress! + offset, buffer.count - offset, Int32(MSG_NOSIGNAL))
                    if n <= 0 { return false }
                    offset += n
                }
                return true
            }
        }
        @discardableResult
        public func write(_ text: String) -> Bool { write(Data(text.utf8)) }
        /// Blocks until the client closes the connection (or it fails): how a test sees that a
        /// cancelled transfer really let go of its connection.
        public func waitForClose() {
            var byte: UInt8 = 0
            while recv(fd, &byte, 1, 0) > 0 {}
        }
        /// Blocks until the client's TCP stack has acknowledged every byte written so far, so that
        /// a `reset()` that follows cannot overtake them.
        public func waitUntilDelivered() {
            var unacknowledged: Int32 = 1
            while ioctl(fd, UInt(TIOCOUTQ), &unacknowledged) == 0, unacknowledged > 0 { sched_yield() }
        }
        /// Ends the connection with a TCP reset instead of a clean close.
        public func reset() {
            var linger = Foundation.linger(l_onoff: 1, l_linger: 0)
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Foundation.linger>.size))
        }
    }

    /// The request line and headers, lower-cased header names.
    public struct Request: Sendable {
        public let method: String
        public let path: String
        public let headers: [String: String]
    }

    public let port: UInt16
    private let listener: Int32
    private let recorder = Recorder()

    private final class Recorder: Sendable {
        let counter = Mutex<[String: Int]>([:])
        let seen = Mutex<[Request]>([])
        let stopped = Mutex(false)
    }

    public init(_ script: @escaping @Sendable (Request, Connection) -> Void) throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.listener = listener
        var yes: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(listener, 64) == 0 else { throw CommandError(message: "cannot listen on loopback") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        port = UInt16(bigEndian: address.sin_port)
        let recorder = self.recorder
        Thread {
            while true {
                let fd = accept(listener, nil, nil)
                // Only this thread closes the listening socket, once it no longer waits on it: closing it
                // from stop() while accept() runs would let the number be reused by another test's socket.
                if recorder.stopped.withLock({ $0 }) {
                    if fd >= 0 { close(fd) }
                    close(listener)
                    return
                }
                if fd < 0 { continue }
                Thread {
                    defer { close(fd) }
                    guard let request = ScriptedServer.readHead(fd) else { return }
                    recorder.counter.withLock { $0[request.path, default: 0] += 1 }
                    recorder.seen.withLock { $0.append(request) }
                    script(request, Connection(fd: fd))
                }.start()
            }
        }.start()
    }

    /// `http://127.0.0.1:PORT/path`.
    public func url(_ path: String) -> String { "http://127.0.0.1:\(port)\(path)" }

    /// Requests received for `path`.
    public func requests(_ path: String) -> Int { recorder.counter.withLock { $0[path] ?? 0 } }

    /// Every request received, in order.
    public var received: [Request] { recorder.seen.withLock { $0 } }

    /// Stops accepting; the accept thread closes the socket when it wakes.
    public func stop() {
        recorder.stopped.withLock { $0 = true }
        shutdown(listener, Int32(SHUT_RDWR))
    }

    private static func readHead(_ fd: Int32) -> Request? {
        var bytes: [UInt8] = []
        var byte: UInt8 = 0
        while bytes.count < 65536 {
            guard recv(fd, &byte, 1, 0) == 1 else { return nil }
            bytes.append(byte)
            if bytes.count >= 4, bytes.suffix(4) == [13, 10, 13, 10] { break }
        }
        let lines = String(decoding: bytes, as: UTF8.self).components(separatedBy: "\r\n")
        let first = lines[0].split(separator: " ")
        guard first.count >= 2 else { return nil }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        let target = String(first[1])
        let path = target.split(separator: "?", maxSplits: 1).first.map(String.init) ?? target
        return Request(method: String(first[0]), path: path, headers: headers)
    }
}
