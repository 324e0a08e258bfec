import ConciergeCore
import Foundation
import NIOCore
import NIOHTTP1

/// Batch (concurrent, bounded, `all` or `fail_fast`) and chain (sequential with
/// `{{stepId.path}}` templates). Every sub-request runs the whole pipeline as if the client
/// had sent it alone.
struct BatchRunner: Sendable {
    static let maxRequests = 100
    let pipeline: ProxyPipeline
    let log: @Sendable (IncomingRequest, ProxyReply, ContinuousClock.Instant) -> Void

    struct Step: Sendable {
        var id: String
        var method: String
        var path: JSONValue
        var headers: [String: JSONValue]
        var body: JSONValue?
    }

    struct BadRequest: Error {
        var message: String
    }

    // MARK: Parsing

    static func parseSteps(_ body: ByteBuffer, listKey: String) throws(BadRequest) -> (mode: String?, steps: [Step]) {
        guard let json = JSONValue.parse(body.readableBytesView), case .object(let top) = json else {
            throw BadRequest(message: "body must be a JSON object")
        }
        for key in top.keys where ![listKey, "mode"].contains(key) {
            throw BadRequest(message: "unknown field '\(key)'")
        }
        var mode: String? = nil
        if let m = top["mode"] {
            guard case .string(let s) = m, ["all", "fail_fast"].contains(s), listKey == "requests" else {
                throw BadRequest(message: listKey == "requests" ? "mode must be \"all\" or \"fail_fast\"" : "unknown field 'mode'")
            }
            mode = s
        }
        guard case .array(let items)? = top[listKey] else { throw BadRequest(message: "'\(listKey)' must be a list") }
        guard !items.isEmpty else { throw BadRequest(message: "'\(listKey)' is empty") }
        guard items.count <= maxRequests else { throw BadRequest(message: "too many requests: \(items.count) (at most \(maxRequests))") }
        var steps: [Step] = []
        var ids = Set<String>()
        for (i, item) in items.enumerated() {
            let at = "\(listKey)[\(i)]"
            guard case .object(let fields) = item else { throw BadRequest(message: "\(at) must be an object") }
            for key in fields.keys where !["id", "method", "path", "headers", "body"].contains(key) {
                throw BadRequest(message: "\(at): unknown field '\(key)'")
            }
            guard case .string(let id)? = fields["id"], !id.isEmpty else { throw BadRequest(message: "\(at).id must be a non-empty string") }
            guard ids.insert(id).inserted else { throw BadRequest(message: "\(at).id: duplicate id '\(id)'") }
            var method = "GET"
            if let m = fields["method"] {
                guard case .string(let s) = m, !s.isEmpty, s.allSatisfy({ $0.isLetter }) else { throw BadRequest(message: "\(at).method must be an HTTP method") }
                method = s.uppercased()
            }
            guard let path = fields["path"], case .string(let p) = path, p.hasPrefix("/") else {
                throw BadRequest(message: "\(at).path must be a string starting with /")
            }
            if p.hasPrefix(ConciergeRoutes.prefix) { throw BadRequest(message: "\(at).path: \(ConciergeRoutes.prefix) routes cannot be nested") }
            var headers: [String: JSONValue] = [:]
            if let h = fields["headers"] {
                guard case .object(let hs) = h else { throw BadRequest(message: "\(at).headers must be an object") }
                headers = hs
            }
            steps.append(Step(id: id, method: method, path: path, headers: headers, body: fields["body"]))
        }
        return (mode, steps)
    }

    // MARK: Running one step

    func incoming(for step: Step, path: String, headers: [String: JSONValue], body: JSONValue?, parent: IncomingRequest) -> IncomingRequest {
        var h = HTTPHeaders()
        for (name, value) in headers { h.add(name: name, value: value.parameterText) }
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
        return IncomingRequest(method: step.method, target: path, headers: h, body: .buffered(buffer),
                               clientAddress: parent.clientAddress, isSubRequest: true)
    }

    func run(_ request: IncomingRequest) async -> (reply: ProxyReply, body: ByteBuffer) {
        let started = ContinuousClock.now
        var reply = await pipeline.handle(request)
        var body = ByteBuffer()
        switch reply.body {
        case .buffer(let b): body = b
        case .upstream(let stream):
            do {
                for try await var chunk in stream {
                    guard body.readableBytes + chunk.readableBytes <= pipeline.runtime.current.config.limits.maxBodyBytes else {
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
        log(request, reply, started)
        return (reply, body)
    }

    static func resultObject(_ reply: ProxyReply, body: ByteBuffer, id: String? = nil) -> [String: JSONValue] {
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
                                        "cache": reply.cacheStatus.isEmpty ? "MISS" : .string(reply.cacheStatus)]
        if let id { out["id"] = .string(id) }
        return out
    }

    static func failed(_ reply: ProxyReply) -> Bool {
        !reply.succeeded || reply.status >= 400
    }

    // MARK: Batch

    func batch(_ incoming: IncomingRequest) async -> ProxyReply {
        guard case .buffered(let body) = incoming.body else { return .error(400, "batch body missing") }
        let parsed: (mode: String?, steps: [Step])
        do { parsed = try Self.parseSteps(body, listKey: "requests") } catch { return .error(400, error.message) }
        let failFast = parsed.mode == "fail_fast"
        let limit = pipeline.runtime.current.config.limits.batchConcurrency
        var results: [String: JSONValue] = [:]
        var ok = true
        await withTaskGroup(of: (String, ProxyReply, ByteBuffer)?.self) { group in
            var next = 0
            var stop = false
            func start() {
                let step = parsed.steps[next]
                next += 1
                let request = self.incoming(for: step, path: step.path.stringValue ?? "/", headers: step.headers, body: step.body, parent: incoming)
                group.addTask {
                    let (reply, body) = await self.run(request)
                    if Task.isCancelled { return nil }
                    return (step.id, reply, body)
                }
            }
            while next < min(limit, parsed.steps.count) { start() }
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
                if next < parsed.steps.count { start() }
            }
        }
        for step in parsed.steps where results[step.id] == nil {
            results[step.id] = ["cancelled": true]
            ok = false
        }
        var reply = ProxyReply.json(200, ["ok": .bool(ok), "results": .object(results)])
        reply.succeeded = ok
        return reply
    }

    // MARK: Chain

    func chain(_ incoming: IncomingRequest) async -> ProxyReply {
        guard case .buffered(let body) = incoming.body else { return .error(400, "chain body missing") }
        let steps: [Step]
        do { steps = try Self.parseSteps(body, listKey: "steps").steps } catch { return .error(400, error.message) }
        // Templates may only name earlier steps.
        var earlier = Set<String>()
        for step in steps {
            for reference in Self.references(in: [step.path, .object(step.headers), step.body ?? .null]) {
                let stepID = String(reference.split(separator: ".", maxSplits: 1).first ?? "")
                guard earlier.contains(stepID) else {
                    return .error(400, "step '\(step.id)': template {{\(reference)}} names no earlier step")
                }
            }
            earlier.insert(step.id)
        }
        var bodies: [String: JSONValue] = [:]
        var results: [JSONValue] = []
        var ok = true
        for step in steps {
            let path: String
            var headers: [String: JSONValue] = [:]
            var stepBody: JSONValue? = nil
            do throws(BadRequest) {
                path = try Self.resolve(step.path, bodies, encodeForPath: true).parameterText
                for (name, value) in step.headers { headers[name] = try Self.resolve(value, bodies, encodeForPath: false) }
                if let body = step.body { stepBody = try Self.resolve(body, bodies, encodeForPath: false) }
            } catch {
                return .error(400, "step '\(step.id)': \(error.message)")
            }
            let (reply, replyBody) = await run(self.incoming(for: step, path: path, headers: headers, body: stepBody, parent: incoming))
            results.append(.object(Self.resultObject(reply, body: replyBody, id: step.id)))
            bodies[step.id] = JSONValue.parse(replyBody.readableBytesView) ?? .null
            if Self.failed(reply) {
                ok = false
                break
            }
        }
        var reply = ProxyReply.json(200, ["ok": .bool(ok), "results": .array(results)])
        reply.succeeded = ok
        return reply
    }

    /// Every `{{...}}` reference in the strings of a value.
    static func references(in values: [JSONValue]) -> [String] {
        var out: [String] = []
        func walk(_ v: JSONValue) {
            switch v {
            case .string(let s):
                var rest = s[...]
                while let open = rest.range(of: "{{"), let close = rest[open.upperBound...].range(of: "}}") {
                    out.append(rest[open.upperBound..<close.lowerBound].trimmingCharacters(in: .whitespaces))
                    rest = rest[close.upperBound...]
                }
            case .array(let items): items.forEach(walk)
            case .object(let members): members.values.forEach(walk)
            default: break
            }
        }
        values.forEach(walk)
        return out
    }

    /// Substitutes templates; a string that is exactly one template keeps the value's JSON type.
    static func resolve(_ value: JSONValue, _ bodies: [String: JSONValue], encodeForPath: Bool) throws(BadRequest) -> JSONValue {
        switch value {
        case .string(let s):
            guard s.contains("{{") else { return value }
            let trimmed = s.trimmingCharacters(in: .whitespaces)
            if !encodeForPath, trimmed.hasPrefix("{{"), trimmed.hasSuffix("}}"), trimmed.components(separatedBy: "{{").count == 2 {
                return try lookup(String(trimmed.dropFirst(2).dropLast(2)).trimmingCharacters(in: .whitespaces), bodies)
            }
            var out = ""
            var rest = s[...]
            while let open = rest.range(of: "{{"), let close = rest[open.upperBound...].range(of: "}}") {
                out += rest[..<open.lowerBound]
                let reference = rest[open.upperBound..<close.lowerBound].trimmingCharacters(in: .whitespaces)
                let text = try lookup(reference, bodies).parameterText
                out += encodeForPath ? QueryString.percentEncode(text) : text
                rest = rest[close.upperBound...]
            }
            out += rest
            return .string(out)
        case .array(let items):
            var out: [JSONValue] = []
            for item in items { out.append(try resolve(item, bodies, encodeForPath: encodeForPath)) }
            return .array(out)
        case .object(let members):
            var out: [String: JSONValue] = [:]
            for (k, v) in members { out[k] = try resolve(v, bodies, encodeForPath: encodeForPath) }
            return .object(out)
        default:
            return value
        }
    }

    static func lookup(_ reference: String, _ bodies: [String: JSONValue]) throws(BadRequest) -> JSONValue {
        let parts = reference.split(separator: ".", maxSplits: 1).map(String.init)
        guard let body = bodies[parts[0]] else { throw BadRequest(message: "unknown template path {{\(reference)}}") }
        guard let value = body[path: parts.count > 1 ? parts[1] : ""] else {
            throw BadRequest(message: "unknown template path {{\(reference)}}: no such value in step '\(parts[0])' body")
        }
        return value
    }
}
