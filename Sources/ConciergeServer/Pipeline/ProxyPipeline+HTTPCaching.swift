import ConciergeCore
import ConciergeStorage
import NIOCore
import NIOHTTP1

/// Steps 4–9 for an endpoint (or the pass-through) with `cache.mode: http`: RFC 9111 as a shared
/// cache. The upstream's headers decide what is stored and for how long (``HTTPCaching``), the
/// request's own directives what it accepts (``RequestCacheDirectives``), `Vary` picks the
/// variant (``VaryIndex``), and an unsafe method invalidates what it changed.
extension ProxyPipeline {
    nonisolated(nonsending) func handleHTTPCaching(_ p: PreparedRequest, key baseKey: String) async -> ProxyAnswer {
        guard p.request.method == "GET" || p.request.method == "HEAD" else {
            let result = await exchange.run(p)
            return Self.withStatus(result.answer, .miss, "concierge; fwd=method; fwd-status=\(result.answer.reply.status)")
        }
        let directives = RequestCacheDirectives(p.originalHeaders)
        let key = varyIndex.key(baseKey, request: p.originalHeaders)
        let now = cache.clock.now
        // A request with its own `Authorization` takes only what RFC 9111 §3.5 lets be shared.
        let ownAuthorization = p.carriesOwnAuthorization
        let entry = await cache.lookup(key).flatMap { !ownAuthorization || HTTPCaching.sharesAuthorizedReplies($0.headers) ? $0 : nil }
        let policy = p.endpoint.cache
        let windows = entry.map { HTTPCaching.staleWindows($0.headers, endpointStale: (policy.staleWhileRevalidate.seconds, policy.staleIfError.seconds)) }
        if let entry, let windows, !directives.noCache {
            let age = Double(entry.storedAge) + (now - entry.storedAt)
            let mustRevalidate = HTTPCaching.mustRevalidate(entry.headers)
            switch directives.use(age: age, freshLeft: entry.freshUntil - now, mustRevalidate: mustRevalidate) {
            case .fresh:
                let hit = Self.conditional(CachedReply.make(entry, p, status: .hit, now: now), request: p.originalHeaders)
                return Self.ranged(hit, request: p.originalHeaders)
            case .staleAccepted:
                return CachedReply.make(entry, p, status: .stale, now: now, detail: "max-stale")
            case .no:
                // Not for a request with its own credentials: others may join a background refresh.
                if directives.maxAge == nil, directives.minFresh == nil, !ownAuthorization, now < entry.freshUntil + windows.whileRevalidate {
                    revalidateHTTPInBackground(p, key: baseKey, entry: entry)
                    return CachedReply.make(entry, p, status: .stale, now: now, detail: "stale-while-revalidate")
                }
            }
        }
        if directives.onlyIfCached {
            var reply = ProxyReply(status: 504, body: .buffer(ByteBuffer()))
            reply.headers.add(name: "Cache-Status", value: "concierge; fwd=miss; detail=only-if-cached")
            return ProxyAnswer(reply, RequestReport(endpoint: p.endpoint.name, cache: .miss))
        }
        let forward = directives.noCache ? "request" : entry != nil ? "stale" : varyIndex.varies(baseKey) ? "vary-miss" : "uri-miss"
        let fetched: Fetched
        let me = UInt64.random(in: 1...UInt64.max)
        if directives.noCache || directives.noStore || ownAuthorization {
            // Never collapsed with others: a reply to its own credentials may be its alone.
            fetched = await fetchAndStoreHTTP(p, baseKey: baseKey, store: !directives.noStore, revalidating: entry)
        } else {
            // Waiters get the leader's reply only when it is their variant too.
            let shared = await coalescer.run(key: key) {
                var led = await self.fetchAndStoreHTTP(p, baseKey: baseKey, store: true, revalidating: entry)
                led.ledBy = me
                return led
            }
            fetched = shared.variant == nil || shared.variant == varyIndex.key(baseKey, request: p.originalHeaders)
                ? shared : await fetchAndStoreHTTP(p, baseKey: baseKey, store: true, revalidating: nil)
        }
        let collapsed = fetched.ledBy != 0 && fetched.ledBy != me
        if let updated = fetched.updated {
            // A 304: the stored body with the refreshed fields.
            var answer = CachedReply.make(updated, p, status: .hit, now: cache.clock.now)
            answer.reply.headers.replaceOrAdd(name: "Cache-Status", value: "concierge; fwd=stale; fwd-status=304"
                                              + (fetched.stored ? "; stored" : "") + "; ttl=\(updated.remainingTTL(at: cache.clock.now))")
            return Self.conditional(answer, request: p.originalHeaders)
        }
        if case .upstreamDown = fetched.result, let entry, let windows {
            if now < entry.freshUntil + windows.ifError {
                return CachedReply.make(entry, p, status: .stale, now: now, detail: "stale-if-error")
            }
            if HTTPCaching.mustRevalidate(entry.headers) {
                // must-revalidate with the upstream failing: a 504, never the stale entry (RFC 9111 §4.2.4).
                var reply = LocalReplies.unavailable(p.config, status: 504)
                reply.headers.replaceOrAdd(name: "Cache-Status", value: "concierge; fwd=stale; detail=must-revalidate")
                return ProxyAnswer(reply, RequestReport(endpoint: p.endpoint.name, cache: .miss))
            }
        }
        let status = fetched.result.answer.reply.status
        return Self.withStatus(fetched.result.answer, directives.noCache ? .bypass : .miss,
                               "concierge; fwd=\(forward); fwd-status=\(status)" + (fetched.stored ? "; stored" : "")
                                   + (collapsed ? "; collapsed" : "") + (fetched.storedTTL.map { "; ttl=\($0)" } ?? ""))
    }

    /// One exchange, and its reply stored when RFC 9111 allows: a `GET` (a `HEAD` never fills
    /// the entry its `GET` reads), under its variant's key. With `revalidating`, a stale entry
    /// with validators, the request is made conditional, and a `304` refreshes that entry.
    nonisolated(nonsending) func fetchAndStoreHTTP(_ p: PreparedRequest, baseKey: String, store: Bool, revalidating: CacheEntry?) async -> Fetched {
        let seen = shared?.appliedSeq
        var sent = p
        let stale = revalidating.flatMap { entry in Self.makeConditional(&sent, entry) ? entry : nil }
        let result = await exchange.run(sent)
        let now = cache.clock.now
        guard p.request.method == "GET", case .success(_, let storable?) = result else { return Fetched(result: result, stored: false) }
        let policy = p.endpoint.cache
        var (status, headers, body) = (storable.status, storable.headers, storable.body)
        if let stale, status == 304 {
            (status, headers, body) = (stale.status, HTTPCaching.updated(stale.headers, with: storable.headers), stale.body)
            headers.remove(name: "age")
        } else if status == 304 {
            return Fetched(result: result, stored: false)
        }
        let freshness = HTTPCaching.storage(request: p.originalHeaders, status: status, reply: headers,
                                            defaultTTL: policy.ttl.seconds, maxTTL: policy.maxTTL?.seconds,
                                            endpointStale: (policy.staleWhileRevalidate.seconds, policy.staleIfError.seconds), now: now)
        let validatable = HTTPCaching.validators(headers) != nil
        let varying = headers["vary"].flatMap { FieldList.elements($0) }.filter { !$0.isEmpty }
        // The stored `Age` is the reply's age on arrival, so a hit's `Age` adds to what made it stale.
        let initialAge = Int(HTTPCaching.initialAge(headers, date: headers.first(name: "date").flatMap(HTTPDate.parse), now: now))
        headers.remove(name: "age")
        if initialAge > 0 { headers.add(name: "Age", value: String(initialAge)) }
        // A reply that sets a cookie (the client's copy says so where an envelope's storable one
        // lost the field) is not stored, or with `store_set_cookie` stored without it.
        let setsCookie = headers.contains(name: "set-cookie") || result.answer.reply.headers.contains(name: "set-cookie")
        let kept = setsCookie && !policy.storeSetCookie ? nil : HTTPCaching.storedFields(headers, storeSetCookie: true)
        var entry: CacheEntry? = nil
        if let freshness, let kept, !varying.contains("*"),
           freshness.ttl > 0 || freshness.staleIfError > 0 || freshness.staleWhileRevalidate > 0 || validatable {
            varyIndex.record(baseKey, fields: varying)
            // A reply with validators is kept a day past its windows, to be revalidated.
            entry = CacheEntry(key: varyIndex.key(baseKey, request: p.originalHeaders), endpoint: p.endpoint.name, userID: p.scope.userID,
                               status: status, headers: kept, body: body, storedAt: now, ttl: freshness.ttl,
                               staleWhileRevalidate: freshness.staleWhileRevalidate,
                               staleIfError: max(freshness.staleIfError, validatable ? Self.validationRetention : 0),
                               version: policy.version ?? p.config.settings.cache.version)
            entry?.tags = Self.tags(p, Storable(status: status, headers: headers, body: body, headerTags: storable.headerTags))
        }
        var stored = false
        if store, let entry {
            stored = cache.store(entry)
            variantKeys.stored(entry.key)
            if stored, let shared, let seen { shared.store(entry, seen: seen) }
        }
        // A 304 answers this client with the stored body and the refreshed fields, its cookie too.
        let updated = stale != nil && storable.status == 304
            ? (setsCookie ? nil : entry) ?? CacheEntry(key: stale!.key, endpoint: p.endpoint.name, userID: p.scope.userID, status: status,
                                                       headers: headers, body: body, storedAt: now, ttl: 0, staleWhileRevalidate: 0,
                                                       staleIfError: 0, version: stale!.version)
            : nil
        return Fetched(result: result, stored: stored, variant: varying.isEmpty ? nil : entry?.key, updated: updated,
                       storedTTL: stored ? entry.map { Int($0.ttl.rounded(.down)) } : nil)
    }

    /// How long past its stale windows an entry with validators is kept for revalidation.
    static let validationRetention: Double = 86_400

    /// Adds the stale entry's validators to the request (`If-None-Match`, `If-Modified-Since`);
    /// `false` when the entry has none or the client sent conditions of its own.
    static func makeConditional(_ p: inout PreparedRequest, _ entry: CacheEntry) -> Bool {
        guard let (etag, modified) = HTTPCaching.validators(entry.headers) else { return false }
        for name in ["if-none-match", "if-modified-since", "if-match", "if-unmodified-since", "if-range", "range"]
        where p.originalHeaders.contains(name: name) {
            return false
        }
        if let etag { p.request.headers.replaceOrAdd(name: "If-None-Match", value: etag) }
        if let modified { p.request.headers.replaceOrAdd(name: "If-Modified-Since", value: modified) }
        return true
    }

    /// Safe methods (RFC 9110 §9.2.1); every other one, unknown ones included, is unsafe.
    static let safeMethods: Set<String> = ["GET", "HEAD", "OPTIONS", "TRACE"]

    /// An unsafe request on a `mode: http` endpoint: forwarded, and a non-error reply
    /// invalidates what its target stored, before the client gets the reply.
    nonisolated(nonsending) func handleUnsafeHTTP(_ p: PreparedRequest) async -> ProxyAnswer {
        let result = await exchange.run(p)
        await invalidateAfterUnsafe(p, result)
        return Self.withStatus(result.answer, .miss, "concierge; fwd=method; fwd-status=\(result.answer.reply.status)")
    }

    /// A non-error reply to an unsafe method invalidates the stored replies of its target
    /// and of a same-origin `Location` or `Content-Location` (RFC 9111 §4.4): each URL's key
    /// and its variants, found through the key index (``CacheStore/invalidate(urlKeys:hotKeys:)``).
    /// An invalidation that storage cannot make is logged and counted, never dropped silently.
    nonisolated(nonsending) private func invalidateAfterUnsafe(_ p: PreparedRequest, _ result: UpstreamExchange.Result) async {
        let reply = result.answer.reply
        guard (200..<400).contains(reply.status) else { return }
        var keys = [p.getKey(target: p.receivedTarget)]
        for name in ["location", "content-location"] {
            guard let value = reply.headers.first(name: name), let target = Self.sameOriginTarget(value, base: p.upstream.baseURL, requestPath: p.request.path) else { continue }
            keys.append(p.getKey(target: target))
        }
        let urlKeys = Array(Set(keys))
        do {
            _ = try await cache.invalidate(urlKeys: urlKeys, hotKeys: variantKeys.take(urlKeys))
        } catch {
            exchange.stats.increment(.httpInvalidationsSkipped)
            exchange.logger.error("an unsafe request's invalidation was skipped: storage failed",
                                  metadata: p.logMetadata(["endpoint": "\(p.endpoint.name)", "method": "\(p.request.method)",
                                                           "urls": "\(urlKeys.count)", "error": "\(error)"]))
        }
    }

    /// A `Location` as a path and query on the upstream's origin: a relative reference, or an
    /// absolute URL of that origin; `nil` for another origin.
    static func sameOriginTarget(_ value: String, base: String, requestPath: String) -> String? {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        if trimmed.hasPrefix("/"), !trimmed.hasPrefix("//") { return trimmed }
        if let origin = Self.origin(of: base), trimmed.lowercased().hasPrefix(origin.lowercased()) {
            let rest = String(trimmed.dropFirst(origin.count))
            return rest.isEmpty ? "/" : rest.hasPrefix("/") ? rest : nil
        }
        if !trimmed.contains(":"), !trimmed.hasPrefix("//") {
            // Relative to the request's directory.
            let directory = requestPath.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
            return directory + "/" + trimmed
        }
        return nil
    }

    /// `scheme://authority` of a base URL.
    private static func origin(of url: String) -> String? {
        guard let scheme = url.range(of: "://") else { return nil }
        let rest = url[scheme.upperBound...]
        let end = rest.firstIndex(of: "/") ?? rest.endIndex
        return String(url[..<end])
    }

    /// A client's own conditional `GET` answered from a fresh entry (RFC 9110 §13.2.2): `304`
    /// when its `If-None-Match` names the entry's `ETag` (weak comparison), or, without
    /// `If-None-Match`, when the entry was not modified since `If-Modified-Since`.
    static func conditional(_ answer: ProxyAnswer, request: HTTPHeaders) -> ProxyAnswer {
        let reply = answer.reply
        guard reply.status == 200 else { return answer }
        var notModified = false
        if request.contains(name: "if-none-match") {
            guard let etag = reply.headers.first(name: "etag") else { return answer }
            let wanted = request["if-none-match"].flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }
            notModified = wanted.contains("*") || wanted.contains { weakTag($0) == weakTag(etag) }
        } else if let since = request.first(name: "if-modified-since").flatMap(HTTPDate.parse),
                  let modified = (reply.headers.first(name: "last-modified") ?? reply.headers.first(name: "date")).flatMap(HTTPDate.parse) {
            notModified = modified <= since
        }
        guard notModified else { return answer }
        var headers = HTTPHeaders()
        for (name, value) in reply.headers where !ASCIICase.equalsAny(name, lowercase: ["content-length", "content-type", "transfer-encoding"]) {
            headers.add(name: name, value: value)
        }
        return ProxyAnswer(ProxyReply(status: 304, headers: headers, body: .buffer(ByteBuffer())), answer.report)
    }

    /// A `Range` request answered from a complete stored `200` (RFC 9110 §14): one byte range
    /// (`a-b`, `a-`, `-n`) as a `206` with `Content-Range`, an unsatisfiable one as `416`; several
    /// ranges, another unit, or an `If-Range` that does not match get the whole `200`.
    static func ranged(_ answer: ProxyAnswer, request: HTTPHeaders) -> ProxyAnswer {
        guard answer.reply.status == 200, let range = request.first(name: "range"), case .buffer(let body) = answer.reply.body else { return answer }
        if let condition = request.first(name: "if-range") {
            let etag = answer.reply.headers.first(name: "etag")
            let strongMatch = etag.map { !$0.hasPrefix("W/") && $0 == condition } ?? false
            let dateMatch = answer.reply.headers.first(name: "last-modified") == condition && HTTPDate.parse(condition) != nil
            guard strongMatch || dateMatch else { return answer }
        }
        let text = range.trimmingCharacters(in: .whitespaces)
        guard text.lowercased().hasPrefix("bytes="), !text.contains(",") else { return answer }
        let spec = text.dropFirst(6).trimmingCharacters(in: .whitespaces)
        let parts = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return answer }
        let length = body.readableBytes
        let first: Int, last: Int
        if parts[0].isEmpty {
            guard let suffix = Int(parts[1]), suffix >= 0 else { return answer }
            (first, last) = (max(0, length - suffix), length - 1)
            if suffix == 0 { return unsatisfiable(answer, length: length) }
        } else {
            guard let a = Int(parts[0]), a >= 0 else { return answer }
            let b = parts[1].isEmpty ? length - 1 : Int(parts[1])
            guard let b, b >= a else { return answer }
            (first, last) = (a, min(b, length - 1))
        }
        guard first < length, first <= last else { return unsatisfiable(answer, length: length) }
        var reply = answer.reply
        reply.status = 206
        reply.headers.replaceOrAdd(name: "Content-Range", value: "bytes \(first)-\(last)/\(length)")
        reply.body = .buffer(body.getSlice(at: body.readerIndex + first, length: last - first + 1) ?? ByteBuffer())
        return ProxyAnswer(reply, answer.report)
    }

    private static func unsatisfiable(_ answer: ProxyAnswer, length: Int) -> ProxyAnswer {
        var reply = ProxyReply(status: 416, body: .buffer(ByteBuffer()))
        reply.headers.add(name: "Content-Range", value: "bytes */\(length)")
        return ProxyAnswer(reply, answer.report)
    }

    private static func weakTag(_ tag: String) -> String {
        let t = tag.trimmingCharacters(in: .whitespaces)
        return t.hasPrefix("W/") ? String(t.dropFirst(2)) : t
    }

    private func revalidateHTTPInBackground(_ p: PreparedRequest, key: String, entry: CacheEntry) {
        revalidation.submit(key: key) {
            _ = await self.coalescer.run(key: self.varyIndex.key(key, request: p.originalHeaders)) {
                await self.fetchAndStoreHTTP(p, baseKey: key, store: true, revalidating: entry)
            }
        }
    }
}

extension PreparedRequest {
    /// Whether the client sent an `Authorization` of its own that reaches the upstream (not one
    /// that Concierge's injection replaces): RFC 9111 §3.5 then limits what is shared.
    var carriesOwnAuthorization: Bool {
        !(injects && config.injector.replacesAuthorization) && originalHeaders.contains(name: "authorization")
    }
}
