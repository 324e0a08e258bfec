/// Request path, envelope step: reads the business code in a JSON reply and says what it means.
///
/// Codes are read on every reply below 500, whatever its HTTP status: a refresh code on a
/// 400 is an expiry signal, a success code on a 4xx is still not a success (only a 2xx can
/// be one). A 2xx body without a code is a success only with `success_when_missing`.
///
/// A class: one per loaded configuration, read on every enveloped reply; as a struct each
/// use copied its lists and sets (a retain and a release of each).
public final class EnvelopeReader: Sendable {
    public enum Outcome: Sendable, Equatable {
        /// A success code (or no code, with `success_when_missing`): cacheable logical success.
        case success(code: BusinessCode?)
        /// A refresh code: refresh the token and replay.
        case refresh(code: BusinessCode)
        /// A logout code: drop the session.
        case logout(code: BusinessCode)
        /// Any other code, or JSON without a code: a logical failure, passed on, not cached.
        case failure(code: BusinessCode?)
        /// Empty or non-JSON body on a JSON endpoint: the `unavailable` reply.
        case notJSON
    }

    public let envelope: ConciergeConfig.Envelope
    /// `code_path` split for ``JSONScan`` once, not on every reply.
    private let codePathComponents: [[UInt8]]

    public init(envelope: ConciergeConfig.Envelope) {
        self.envelope = envelope
        codePathComponents = JSONScan.components(envelope.codePath)
    }

    /// ``classify(_:status:)`` and ``code(in:)`` of a reply's bytes when no later step needs
    /// its tree: only the value at `code_path` is decoded (``JSONScan``, which still checks the
    /// whole text), and the full parser reads only a text the scan refuses. No tree, not even
    /// a skeleton of the path, is built.
    public func judge(_ bytes: some Collection<UInt8>, status: Int = 200) -> (outcome: Outcome, code: BusinessCode?) {
        let value: JSONValue?
        switch JSONScan.value(at: codePathComponents, in: bytes) {
        case .notJSON:
            guard let body = JSONValue.parse(bytes) else { return (.notJSON, nil) }
            value = body[path: envelope.codePath]
        case .missing:
            value = nil
        case .found(let found):
            value = found
        }
        let code = code(of: value)
        return (classify(code: code, value: value, status: status), code)
    }

    /// The code at `code_path`: integers (also as numeric strings), and text codes when the
    /// envelope lists any text code; `nil` when there is none.
    public func code(in body: JSONValue?) -> BusinessCode? {
        code(of: body?[path: envelope.codePath])
    }

    private func code(of value: JSONValue?) -> BusinessCode? {
        guard let value else { return nil }
        if let n = value.intValue { return .number(n) }
        if envelope.readsTextCodes, case .string(let s) = value, !s.isEmpty { return .text(s) }
        return nil
    }

    /// Classifies a parsed body (`nil` when the body was not JSON) of a reply with HTTP
    /// `status` (below 500; the caller answers 5xx with `unavailable` before asking).
    public func classify(_ body: JSONValue?, status: Int = 200) -> Outcome {
        guard let body else { return .notJSON }
        let value = body[path: envelope.codePath]
        return classify(code: code(of: value), value: value, status: status)
    }

    /// The outcome of a JSON reply whose value at `code_path` is `value` (read as `code`).
    private func classify(code: BusinessCode?, value: JSONValue?, status: Int) -> Outcome {
        let isSuccessStatus = (200..<300).contains(status)
        guard let code else {
            let missing = value == nil || value == .null
            return missing && isSuccessStatus && envelope.successWhenMissing ? .success(code: nil) : .failure(code: nil)
        }
        if envelope.refreshCodes(contains: code) { return .refresh(code: code) }
        if envelope.logoutCodes(contains: code) { return .logout(code: code) }
        if envelope.successCodes(contains: code) { return isSuccessStatus ? .success(code: code) : .failure(code: code) }
        return .failure(code: code)
    }

    public func message(_ body: JSONValue?) -> String? {
        body?[path: envelope.messagePath]?.stringValue
    }
}

extension ConciergeConfig.Envelope {
    /// Whether non-numeric string codes are read at all (when any listed code is text).
    public var readsTextCodes: Bool {
        !successTextCodes.isEmpty || !refreshTextCodes.isEmpty || !logoutTextCodes.isEmpty
    }

    public func successCodes(contains code: BusinessCode) -> Bool {
        switch code {
        case .number(let n): return successCodes.contains(n)
        case .text(let s): return successTextCodes.contains(s)
        }
    }

    public func refreshCodes(contains code: BusinessCode) -> Bool {
        switch code {
        case .number(let n): return refreshCodes.contains(n)
        case .text(let s): return refreshTextCodes.contains(s)
        }
    }

    public func logoutCodes(contains code: BusinessCode) -> Bool {
        switch code {
        case .number(let n): return logoutCodes.contains(n)
        case .text(let s): return logoutTextCodes.contains(s)
        }
    }
}
