/// Tunables of the sample business API.
public struct SampleAPIConfiguration: Sendable {
    /// How long an issued access token stays valid before it answers code 801.
    public var accessTokenTTL: Duration
    /// Delay applied before answering `POST /api/token/refresh` (to provoke concurrent refreshes).
    public var refreshDelay: Duration
    /// Secret checked by `/api/signed`; `nil` accepts every request unsigned.
    public var signingSecret: String?

    public init(
        accessTokenTTL: Duration = .seconds(3600),
        refreshDelay: Duration = .zero,
        signingSecret: String? = nil
    ) {
        self.accessTokenTTL = accessTokenTTL
        self.refreshDelay = refreshDelay
        self.signingSecret = signingSecret
    }
}
