import ConciergeCore
import Foundation
import NIOCore
import NIOHTTP1

/// Batch (concurrent, bounded, `all` or `fail_fast`) and chain (sequential with
/// `{{stepId.path}}` templates). Every sub-request runs the whole pipeline as if the client
/// had sent it alone.
struct BatchRunner: Sendable {
    let pipeline: ProxyPipeline
    let log: @Sendable (IncomingRequest, ProxyAnswer, ContinuousClock.Instant) -> Void

    // MARK: Running one step

    func incoming(for step: SubRequest, path: String, headers: [(String, String)], body: JSONValue?, parent: IncomingRequest) -> IncomingRequest {
        var h = HTTPHeaders()
        // Names and values were checked by SubRequestList / ChainTemplate (RFC 9110).
        for (name, value) in headers { h.add(name: name, value: value) }
        var buffer = ByteBuffer()
        if let body, body != .null {
            if case .string(let s) = body {
                buffer = ByteBuffer(string: s)
            } else {
                buffer = ByteBuffer(bytes: body.serializedBytes)
                if !h.contains(name: "content-type") { h.add(name: "Content-Type", value: "application/json") }
            }
        }
        for name in ["x-forwarded-for"] { if let v = parent.headers.first(name: name) { h.replaceOrAdd(name: name, value: v) } }
        var incoming = IncomingRequest(method: step.method, target: path, headers: h, body: .buffered(buffer),
                                       clientAddress: parent.clientAddress, isSubRequest: true)
        incoming.identity = parent.identity
        return incoming
    }

    func run(_ request: IncomingRequest) async -> (answer: ProxyAnswer, body: ByteBuffer) {
        let started = ContinuousClock.now
        var answer = await pipeline.handle(request)
        var reply = answer.reply
        var body = ByteBuffer()
        switch reply.body {
        case .buffer(let b): body = b
        case .upstream(let stream):
            do {
                for try await var chunk in stream {
                    guard body.readableBytes + chunk.readableBytes <= pipeline.runtime.current.settings.limits.maxBodyBytes else {
                        reply = .json(502, ["error": "sub-request reply too large for a batch"])
                        body = reply.bufferedBody ?? ByteBuffer()
                        break
                    }
                    body.writeBuffer(&chunk)
                }
            } catch {
                if Task.isCancelled { break }
                reply = .json(502, ["error": .string("upstream reply broke off: \(error)")])
                body = reply.bufferedBody ?? ByteBuffer()
            }
        case .events:
            reply = .error(400, "the events stream cannot be part of a batch")
            body = reply.bufferedBody ?? ByteBuffer()
        }
        reply.body = .buffer(body)
        answer.reply = reply
        log(request, answer, started)
        return (answer, body)
    }

    static func resultObject(_ answer: ProxyAnswer, body: ByteBuffer, id: String? = nil) -> [String: JSONValue] {
        let reply = answer.reply
        var headers: [String: JSONValue] = [:]
        for (name, value) in reply.headers { headers[name] = .string(value) }
        let bodyValue: JSONValue
        if body.readableBytes == 0 {
            bodyValue = .null
        } else if let json = JSONValue.parse(body.readableBytesView) {
            bodyValue = json
        } else {
            bodyValue = .string(Data(body.readableBytesView).base64EncodedString())
        }
        var out: [String: JSONValue] = ["status": .int(Int64(reply.status)), "headers": .object(headers), "body": bodyValue,
                                        "cache": .string((answer.report.cache ?? .miss).rawValue)]
        if let id { out["id"] = .string(id) }
        return out
    }

    static func failed(_ answer: ProxyAnswer) -> Bool {
        !answer.report.succeeded || answer.reply.status >= 400
    }

    static func refused(_ message: String) -> ProxyAnswer {
        ProxyAnswer(.error(400, message), RequestReport())
    }

    // MARK: Batch

    func batch(_ incoming: IncomingRequest) async -> ProxyAnswer {
        guard case .buffered(let body) = incoming.body else { return Self.refused("batch body missing") }
        let parsed: SubRequestList
        var headers: [String: [(String, String)]] = [:]
        do {
            parsed = try SubRequestList.parse(body.readableBytesView, listKey: "requests")
            for step in parsed.requests { headers[step.id] = try step.literalHeaders() }
        } catch {
            return Self.refused(error.message)
        }
        let failFast = parsed.mode == "fail_fast"
        let limit = pipeline.runtime.current.settings.limits.batchConcurrency
        var results: [String: JSONValue] = [:]
        var ok = true
        await withTaskGroup(of: (String, ProxyAnswer, ByteBuffer)?.self) { group in
            var next = 0
            var stop = false
            func start() {
                let step = parsed.requests[next]
                next += 1
                let request = self.incoming(for: step, path: step.path.stringValue ?? "/", headers: headers[step.id] ?? [], body: step.body, parent: incoming)
                group.addTask {
                    let (reply, body) = await self.run(request)
                    if Task.isCancelled { return nil }
                    return (step.id, reply, body)
                }
            }
            while next < min(limit, parsed.requests.count) { start() }
            while let finished = await group.next() {
                guard let (id, reply, body) = finished else { continue }
                if stop { continue }
                results[id] = .object(Self.resultObject(reply, body: body))
                if Self.failed(reply) {
                    ok = false
                    if failFast {
                        stop = true
                        group.cancelAll()
                        continue
                    }
                }
                if next < parsed.requests.count { start() }
            }
        }
        for step in parsed.requests where results[step.id] == nil {
            results[step.id] = ["cancelled": true]
            ok = false
        }
        return ProxyAnswer(.json(200, ["ok": .bool(ok), "results": .object(results)]), RequestReport(succeeded: ok))
    }

    // MARK: Chain

    func chain(_ incoming: IncomingRequest) async -> ProxyAnswer {
        guard case .buffered(let body) = incoming.body else { return Self.refused("chain body missing") }
        let steps: [SubRequest]
        do {
            steps = try SubRequestList.parse(body.readableBytesView, listKey: "steps").requests
            try ChainTemplate.checkReferences(steps)
        } catch {
            return Self.refused(error.message)
        }
        var bodies: [String: JSONValue] = [:]
        var results: [JSONValue] = []
        var ok = true
        for step in steps {
            let resolved: (path: String, headers: [(String, String)], body: JSONValue?)
            do { resolved = try ChainTemplate.resolve(step, bodies) } catch { return Self.refused(error.message) }
            let request = self.incoming(for: step, path: resolved.path, headers: resolved.headers, body: resolved.body, parent: incoming)
            let (reply, replyBody) = await run(request)
            results.append(.object(Self.resultObject(reply, body: replyBody, id: step.id)))
            bodies[step.id] = JSONValue.parse(replyBody.readableBytesView) ?? .null
            if Self.failed(reply) {
                ok = false
                break
            }
        }
        return ProxyAnswer(.json(200, ["ok": .bool(ok), "results": .array(results)]), RequestReport(succeeded: ok))
    }
}
